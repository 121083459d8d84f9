// The byte streams a session runs on: plain TCP, or TLS over TCP when
// server.tls-cert is set. The HTTP and WebSocket sessions are written once,
// over either; the few places where TLS differs (the handshake, how a
// connection ends) ask is_tls. Internal to net/.
#pragma once

#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <type_traits>

namespace troupe::net {

using plain_stream = boost::beast::tcp_stream;
using tls_stream = boost::beast::ssl_stream<boost::beast::tcp_stream>;

template <class Stream>
inline constexpr bool is_tls = std::is_same_v<Stream, tls_stream>;

} // namespace troupe::net
