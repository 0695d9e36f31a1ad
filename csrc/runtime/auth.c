/* HMAC-SHA256 challenge-response for joins, in both directions: the member
 * proves it knows the secret by signing the coordinator's nonce with its
 * whole join request, and the coordinator proves it by signing the member's. */
#include "runtime/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <string.h>

dsm_status_t dsm_auth_nonce(uint8_t *out, size_t len)
{
    return RAND_bytes(out, (int)len) == 1 ? DSM_OK : DSM_ERR_IO;
}

dsm_status_t dsm_auth_mac_key(const uint8_t *key, size_t key_len, const char *label, const void *a, size_t a_len,
                              const void *b, size_t b_len, uint8_t mac[32])
{
    size_t label_len = strlen(label), total = label_len + a_len + b_len;
    uint8_t stack_buf[512];
    uint8_t *buf = total <= sizeof stack_buf ? stack_buf : OPENSSL_malloc(total);
    if (!buf) return DSM_ERR_NOMEM;
    memcpy(buf, label, label_len);
    if (a_len) memcpy(buf + label_len, a, a_len);
    if (b_len) memcpy(buf + label_len + a_len, b, b_len);
    unsigned int out_len = 32;
    dsm_status_t st = HMAC(EVP_sha256(), key, (int)key_len, buf, total, mac, &out_len) ? DSM_OK : DSM_ERR_AUTH;
    if (buf != stack_buf) OPENSSL_free(buf);
    return st;
}

dsm_status_t dsm_auth_mac(const char *secret, const char *label, const void *a, size_t a_len,
                          const void *b, size_t b_len, uint8_t mac[32])
{
    return dsm_auth_mac_key((const uint8_t *)secret, strlen(secret), label, a, a_len, b, b_len, mac);
}

int dsm_auth_equal(const uint8_t *x, const uint8_t *y, size_t len)
{
    return CRYPTO_memcmp(x, y, len) == 0;
}
