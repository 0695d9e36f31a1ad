/* Cluster-secret authentication: nonces and HMAC-SHA256 (OpenSSL libcrypto). */
#ifndef DSM_RUNTIME_AUTH_H
#define DSM_RUNTIME_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/status.h"

dsm_status_t dsm_auth_nonce(uint8_t *out, size_t len);
/* mac = HMAC-SHA256(secret, label || a || b). */
dsm_status_t dsm_auth_mac(const char *secret, const char *label, const void *a, size_t a_len,
                  const void *b, size_t b_len, uint8_t mac[32]);
/* The same under a key of raw bytes (a session key). */
dsm_status_t dsm_auth_mac_key(const uint8_t *key, size_t key_len, const char *label, const void *a, size_t a_len,
                              const void *b, size_t b_len, uint8_t mac[32]);
/* Constant-time comparison; 1 if equal. */
int dsm_auth_equal(const uint8_t *x, const uint8_t *y, size_t len);

#endif
