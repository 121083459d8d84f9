// Loads the certificate and key into an OpenSSL context, turning each of
// OpenSSL's refusals into a message that names the config key and the file.
#include "net/tls_context.hpp"

#include <boost/asio/ssl/context.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace troupe::net {

namespace ssl = boost::asio::ssl;

namespace {

// "server.tls-cert '/etc/troupe/cert.pem'"
std::string named(const char* key, const std::string& path) {
  return std::string("server.") + key + " '" + path + "'";
}

// OpenSSL reads files itself and says little when one is missing: check first, with errno's words.
void require_readable(const char* key, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw tls_error("cannot read " + named(key, path) + ": " + std::strerror(errno));
}

// OpenSSL's reason for the last failure ("no start line (PEM routines)"), and an empty error queue after.
std::string openssl_reason(const boost::system::error_code& ec) {
  std::string reason = ec ? ec.message() : std::string();
  if (unsigned long e = ::ERR_peek_last_error(); reason.empty() && e != 0) {
    char text[256];
    ::ERR_error_string_n(e, text, sizeof text);
    reason = text;
  }
  ::ERR_clear_error();
  return reason.empty() ? "unknown OpenSSL error" : reason;
}

} // namespace

std::shared_ptr<boost::asio::ssl::context> make_tls_context(const tls_files& files) {
  if (files.cert.empty() != files.key.empty())
    throw tls_error(std::string("server.tls-cert and server.tls-key must be set together (") +
                    (files.cert.empty() ? "server.tls-key" : "server.tls-cert") + " is set, the other is not)");
  require_readable("tls-cert", files.cert);
  require_readable("tls-key", files.key);

  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                   ec);
  if (ec)
    throw tls_error("cannot set up TLS: " + openssl_reason(ec));
  // An encrypted key would otherwise make OpenSSL ask for its passphrase on the terminal.
  ctx->set_password_callback([](std::size_t, ssl::context::password_purpose) { return std::string(); }, ec);

  ctx->use_certificate_chain_file(files.cert, ec);
  if (ec)
    throw tls_error(named("tls-cert", files.cert) + " is not a PEM certificate chain: " + openssl_reason(ec));
  // OpenSSL checks the key against the certificate as it loads it; a key that does not match is
  // told apart from one it could not read.
  ctx->use_private_key_file(files.key, ssl::context::pem, ec);
  const bool mismatch = ec && ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH;
  if (ec && !mismatch)
    throw tls_error(named("tls-key", files.key) + " is not an unencrypted PEM private key: " + openssl_reason(ec));
  if (mismatch || ::SSL_CTX_check_private_key(ctx->native_handle()) != 1)
    throw tls_error(named("tls-key", files.key) + " does not belong to " + named("tls-cert", files.cert) + ": " +
                    openssl_reason(ec));
  return ctx;
}

} // namespace troupe::net
