// TLS for the front door (server.tls-cert, server.tls-key): the certificate
// chain and private key, loaded into the OpenSSL context that every
// connection's handshake uses. Loading checks everything a start-up can check
// (both files set, readable, valid PEM, the key belonging to the certificate),
// so that a bad file stops troupe-serve at start rather than at the first client.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

namespace boost::asio::ssl {
class context;
}

namespace troupe::net {

struct tls_files {
  std::string cert; // PEM: the server's certificate, then any intermediates
  std::string key;  // PEM: its private key, unencrypted
  bool enabled() const { return !cert.empty() || !key.empty(); }
};

// A refused TLS configuration; what() names the config key, the file and OpenSSL's reason.
struct tls_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A TLS 1.2+ server context with the files loaded. Throws tls_error.
std::shared_ptr<boost::asio::ssl::context> make_tls_context(const tls_files& files);

} // namespace troupe::net
