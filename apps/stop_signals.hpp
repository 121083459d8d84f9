// SIGINT and SIGTERM for the long-running apps (troupe-serve, troupe-engine): blocked from construction
// on, which must come before any thread starts (threads inherit the mask), so that only wait() sees them.
#pragma once

#include <csignal>

#include <pthread.h>

namespace troupe::apps {

class stop_signals {
 public:
  stop_signals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  }
  // Blocks until one of them arrives; returns it.
  int wait() const {
    int sig = 0;
    sigwait(&set_, &sig);
    return sig;
  }

 private:
  sigset_t set_;
};

} // namespace troupe::apps
