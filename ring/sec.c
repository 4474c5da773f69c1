/*
 * sec.c: keys, the handshake and frame sealing (see sec.h for the protocol).
 *
 * Invariants: every secret lives in a sec_keys or sec_chan (or on the stack of one function)
 * and is wiped with sodium_memzero when it is no longer needed; no secret reaches a log line or
 * an error message; a frame's plaintext reaches the caller only after its tag verified.
 */
#include "sec.h"

#include "frame.h"
#include "bytes.h"
#include "hr_log.h"
#include "tcp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HS_MAGIC   0x53485248u /* "HRHS" */
#define HS_VERSION 1

enum { MSG_PROOF = 1, MSG_VERDICT = 2 };

/* ================================================================ key files */

hr_status sec_read_key_file(const char *path, uint8_t out[32], char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG, "%s: cannot open key file: %s", path,
                       strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || (st.st_mode & 077)) {
        unsigned mode = (unsigned)(st.st_mode & 0777);
        close(fd);
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: key file is readable by group or others (mode %03o); refusing it "
                       "(run chmod 600 %s)",
                       path, mode, path);
    }
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0) n = 0;
    buf[n] = 0;
    hr_status s = HR_OK;
    char hex[65] = {0};
    int nh = 0, in_comment = 0;
    for (ssize_t i = 0; i < n; i++) {
        char ch = buf[i];
        if (ch == '#') in_comment = 1;
        if (ch == '\n') in_comment = 0;
        if (in_comment || ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n') continue;
        if (nh == 64) {
            nh = 65;
            break;
        }
        hex[nh++] = ch;
    }
    if (nh != 64 || cfg_hex_decode(hex, out, 32) != 0)
        s = hr_fail(err, errlen, HR_ERR_CONFIG,
                    "%s: not a key file (expected 64 hex digits, as hetring keygen writes)", path);
    sodium_memzero(buf, sizeof buf);
    sodium_memzero(hex, sizeof hex);
    return s;
}

hr_status sec_write_key_file(const char *path, const uint8_t key[32], const char *comment,
                             int force, char *err, size_t errlen) {
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (force ? O_TRUNC : O_EXCL), 0600);
    if (fd < 0)
        return hr_fail(err, errlen, HR_ERR_IO, "%s: cannot create key file: %s%s", path,
                       strerror(errno), errno == EEXIST ? " (use --force to replace it)" : "");
    if (fchmod(fd, 0600) != 0) {
        close(fd);
        return hr_fail(err, errlen, HR_ERR_IO, "%s: chmod 600: %s", path, strerror(errno));
    }
    char text[256];
    char hex[65];
    cfg_hex_encode(key, 32, hex);
    int len = snprintf(text, sizeof text, "# %s\n%s\n", comment, hex);
    ssize_t w = write(fd, text, (size_t)len);
    int e = errno;
    sodium_memzero(text, sizeof text);
    sodium_memzero(hex, sizeof hex);
    if (w != len || fsync(fd) != 0) {
        close(fd);
        return hr_fail(err, errlen, HR_ERR_IO, "%s: write: %s", path, strerror(w < 0 ? e : EIO));
    }
    if (close(fd) != 0) return hr_fail(err, errlen, HR_ERR_IO, "%s: close failed", path);
    return HR_OK;
}

void sec_identity_public(const uint8_t seed[32], uint8_t pk[32]) {
    uint8_t sk[crypto_sign_SECRETKEYBYTES];
    crypto_sign_seed_keypair(pk, sk, seed);
    sodium_memzero(sk, sizeof sk);
}

static void expand_id(const char *tmpl, long id, char *out, size_t outlen) {
    size_t o = 0;
    for (const char *p = tmpl; *p && o + 1 < outlen; p++) {
        if (strncmp(p, "{id}", 4) == 0) {
            o += (size_t)snprintf(out + o, outlen - o, "%ld", id);
            if (o >= outlen) o = outlen - 1;
            p += 3;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = 0;
}

hr_status sec_keys_load(sec_keys *k, const cfg *c, long self_id, char *err, size_t errlen) {
    memset(k, 0, sizeof *k);
    k->mode = c->security == CFG_SEC_AUTO ? CFG_SEC_ENCRYPT : c->security;
    if (k->mode == CFG_SEC_NONE) return HR_OK;
    if (sodium_init() < 0) return hr_fail(err, errlen, HR_ERR_IO, "libsodium failed to start");
    hr_status st;
    if (c->key_file[0]) {
        char path[CFG_PATH + 32];
        expand_id(c->key_file, self_id, path, sizeof path);
        uint8_t seed[32];
        HR_CHECK_GOTO(sec_read_key_file(path, seed, err, errlen), st, fail);
        crypto_sign_seed_keypair(k->sign_pk, k->sign_sk, seed);
        sodium_memzero(seed, sizeof seed);
        k->have_identity = 1;
        int idx = cfg_node_index(c, self_id);
        if (idx < 0 || !c->nodes[idx].has_pubkey ||
            sodium_memcmp(c->nodes[idx].pubkey, k->sign_pk, 32) != 0) {
            char hex[65];
            cfg_hex_encode(k->sign_pk, 32, hex);
            st = hr_fail(err, errlen, HR_ERR_CONFIG,
                         "%s: this key's public key %s is not the pubkey pinned for [node.%ld] "
                         "in %s (fix the pubkey or use the right key file)",
                         path, hex, self_id, c->path[0] ? c->path : "the config");
            goto fail;
        }
    }
    if (c->psk_file[0]) {
        HR_CHECK_GOTO(sec_read_key_file(c->psk_file, k->psk, err, errlen), st, fail);
        k->have_psk = 1;
    } else if (c->has_psk) {
        memcpy(k->psk, c->psk, 32);
        k->have_psk = 1;
    }
    if (!k->have_identity && !k->have_psk) {
        st = hr_fail(err, errlen, HR_ERR_CONFIG,
                     "security = %s needs keys (key_file with a pubkey per node, or psk_file)",
                     cfg_security_name(k->mode));
        goto fail;
    }
    return HR_OK;
fail:
    sec_keys_free(k);
    return st;
}

void sec_keys_free(sec_keys *k) {
    sodium_memzero(k, sizeof *k);
}

void sec_chan_free(sec_chan *ch) {
    sodium_memzero(ch, sizeof *ch);
}

const char *sec_aead_name(int aead) {
    switch (aead) {
    case SEC_AEAD_AES256GCM:
        return "AES-256-GCM";
    case SEC_AEAD_XCHACHA20:
        return "XChaCha20-Poly1305";
    default:
        return "none";
    }
}

/* ================================================================ frames */

static void nonce_of(uint64_t ctr, uint8_t n[24]) {
    memset(n, 0, 24);
    for (int i = 0; i < 8; i++) n[i] = (uint8_t)(ctr >> (8 * i));
}

void sec_seal(sec_dir *d, uint8_t *frame, const uint8_t *src, size_t len) {
    uint8_t n[24], dummy = 0;
    uint8_t *pay = frame + FRAME_HDR, *tag = pay + len;
    nonce_of(d->ctr++, n);
    if (d->mode == CFG_SEC_AUTH) {
        if (src != pay && len) memcpy(pay, src, len);
        if (d->aead == SEC_AEAD_AES256GCM)
            crypto_aead_aes256gcm_encrypt_detached_afternm(&dummy, tag, NULL, &dummy, 0, frame,
                                                           FRAME_HDR + len, NULL, n, &d->aes);
        else
            crypto_aead_xchacha20poly1305_ietf_encrypt_detached(&dummy, tag, NULL, &dummy, 0, frame,
                                                                FRAME_HDR + len, NULL, n, d->key);
    } else {
        if (d->aead == SEC_AEAD_AES256GCM)
            crypto_aead_aes256gcm_encrypt_detached_afternm(pay, tag, NULL, src, len, frame,
                                                           FRAME_HDR, NULL, n, &d->aes);
        else
            crypto_aead_xchacha20poly1305_ietf_encrypt_detached(pay, tag, NULL, src, len, frame,
                                                                FRAME_HDR, NULL, n, d->key);
    }
}

int sec_open(sec_dir *d, uint8_t *frame, size_t len, uint8_t *dst) {
    uint8_t n[24], dummy = 0;
    uint8_t *pay = frame + FRAME_HDR, *tag = pay + len;
    int rc;
    nonce_of(d->ctr++, n);
    if (d->mode == CFG_SEC_AUTH) {
        if (d->aead == SEC_AEAD_AES256GCM)
            rc = crypto_aead_aes256gcm_decrypt_detached_afternm(&dummy, NULL, &dummy, 0, tag, frame,
                                                                FRAME_HDR + len, n, &d->aes);
        else
            rc = crypto_aead_xchacha20poly1305_ietf_decrypt_detached(
                &dummy, NULL, &dummy, 0, tag, frame, FRAME_HDR + len, n, d->key);
        if (rc == 0 && dst != pay && len) memcpy(dst, pay, len);
    } else {
        if (d->aead == SEC_AEAD_AES256GCM)
            rc = crypto_aead_aes256gcm_decrypt_detached_afternm(dst, NULL, pay, len, tag, frame,
                                                                FRAME_HDR, n, &d->aes);
        else
            rc = crypto_aead_xchacha20poly1305_ietf_decrypt_detached(dst, NULL, pay, len, tag,
                                                                     frame, FRAME_HDR, n, d->key);
    }
    if (rc != 0) {
        if (len) sodium_memzero(dst, len);
        return -1;
    }
    return 0;
}

static void dir_init(sec_dir *d, int mode, int aead, const uint8_t key[32]) {
    memset(d, 0, sizeof *d);
    d->mode = mode;
    d->aead = aead;
    if (mode == CFG_SEC_NONE) return;
    if (aead == SEC_AEAD_AES256GCM)
        crypto_aead_aes256gcm_beforenm(&d->aes, key);
    else
        memcpy(d->key, key, 32);
}

/* ================================================================ handshake */

/* Hello layout: 0 magic u32 | 4 version u16 | 6 role u8 | 7 mode u8 | 8 epoch u64 | 16 from i64 |
 * 24 to i64 | 32 seg u32 | 36 aes u8 | 64 ephemeral pk (32) | 96 name hash (32) |
 * 128 name prefix (64, for messages). */
typedef struct {
    uint32_t magic, seg;
    int version, role, mode, aes;
    uint64_t epoch;
    long from, to;
    const uint8_t *eph, *name_hash;
    char name[65];
} hello;

static void hello_build(uint8_t h[SEC_HELLO], const sec_hs_params *p, int role,
                        const uint8_t eph[32]) {
    memset(h, 0, SEC_HELLO);
    le_put32(h, HS_MAGIC);
    h[4] = HS_VERSION;
    h[6] = (uint8_t)role;
    h[7] = (uint8_t)p->keys->mode;
    le_put64(h + 8, p->epoch);
    le_put64(h + 16, (uint64_t)p->self_id);
    le_put64(h + 24, (uint64_t)p->expect_id);
    le_put32(h + 32, p->seg_bytes);
    h[36] = p->keys->mode == CFG_SEC_NONE ? 0 : (uint8_t)crypto_aead_aes256gcm_is_available();
    if (eph) memcpy(h + 64, eph, 32);
    crypto_generichash(h + 96, 32, (const uint8_t *)p->c->name, strlen(p->c->name), NULL, 0);
    memcpy(h + 128, p->c->name, strnlen(p->c->name, 63));
}

static void hello_parse(const uint8_t h[SEC_HELLO], hello *o) {
    o->magic = le_get32(h);
    o->version = h[4] | (h[5] << 8);
    o->role = h[6];
    o->mode = h[7];
    o->epoch = le_get64(h + 8);
    o->from = (long)le_get64(h + 16);
    o->to = (long)le_get64(h + 24);
    o->seg = le_get32(h + 32);
    o->aes = h[36];
    o->eph = h + 64;
    o->name_hash = h + 96;
    memcpy(o->name, h + 128, 64);
    o->name[64] = 0;
    for (char *q = o->name; *q; q++)
        if (*q < 32 || *q > 126) *q = '?';
}

/* Check the other end's hello against ours; the reason goes to `why`. */
static hr_status hello_check(const hello *o, const uint8_t mine[SEC_HELLO], const sec_hs_params *p,
                             int want_role, char *why, size_t whylen) {
    if (o->magic != HS_MAGIC)
        return hr_fail(why, whylen, HR_ERR_PROTO, "not a hetring peer (bad handshake magic)");
    if (o->version != HS_VERSION)
        return hr_fail(why, whylen, HR_ERR_PROTO, "protocol version %d, this node speaks %d",
                       o->version, HS_VERSION);
    if (o->role != want_role)
        return hr_fail(why, whylen, HR_ERR_PROTO, "unexpected handshake role");
    if (sodium_memcmp(o->name_hash, mine + 96, 32) != 0)
        return hr_fail(why, whylen, HR_ERR_PROTO, "cluster name '%s' differs from '%s'", o->name,
                       p->c->name);
    if (o->mode != p->keys->mode)
        return hr_fail(why, whylen, HR_ERR_PROTO, "security = %s differs from this node's %s",
                       cfg_security_name(o->mode), cfg_security_name(p->keys->mode));
    int idx = cfg_node_index(p->c, o->from);
    if (idx < 0)
        return hr_fail(why, whylen, HR_ERR_AUTH, "unknown peer: node id %ld is not in the cluster",
                       o->from);
    if (o->from != p->expect_id)
        return hr_fail(why, whylen, HR_ERR_VIEW,
                       "node %ld is not the expected neighbour (node %ld) in view epoch %llu",
                       o->from, p->expect_id, (unsigned long long)p->epoch);
    if (o->to != p->self_id)
        return hr_fail(why, whylen, HR_ERR_PROTO, "it wanted node %ld, this is node %ld", o->to,
                       p->self_id);
    if (o->epoch != p->epoch)
        return hr_fail(why, whylen, HR_ERR_VIEW, "view epoch %llu differs from this node's %llu",
                       (unsigned long long)o->epoch, (unsigned long long)p->epoch);
    if (o->seg != p->seg_bytes)
        return hr_fail(why, whylen, HR_ERR_PROTO, "segment_bytes %u differs from this node's %u",
                       o->seg, p->seg_bytes);
    if (p->keys->have_identity && !p->c->nodes[idx].has_pubkey)
        return hr_fail(why, whylen, HR_ERR_AUTH, "unknown peer: node %ld has no pinned pubkey",
                       o->from);
    return HR_OK;
}

static hr_status msg_send(int fd, int type, int status, const void *body, size_t len,
                          double deadline) {
    uint8_t buf[SEC_MSG_HDR + SEC_TEXT_MAX];
    if (len > SEC_TEXT_MAX) len = SEC_TEXT_MAX;
    memset(buf, 0, SEC_MSG_HDR);
    buf[0] = (uint8_t)type;
    buf[1] = (uint8_t)status;
    le_put32(buf + 4, (uint32_t)len);
    if (len) memcpy(buf + SEC_MSG_HDR, body, len);
    return tcp_send_all(fd, buf, SEC_MSG_HDR + len, deadline);
}

/* Receive one message; the length is checked before the body is read. */
static hr_status msg_recv(int fd, int *type, int *status, uint8_t *body, size_t *len,
                          double deadline) {
    uint8_t h[SEC_MSG_HDR];
    HR_CHECK(tcp_recv_all(fd, h, sizeof h, deadline));
    *type = h[0];
    *status = h[1];
    uint32_t n = le_get32(h + 4);
    if (n > SEC_TEXT_MAX || (*type != MSG_PROOF && *type != MSG_VERDICT) ||
        (*type == MSG_PROOF && n != SEC_PROOF))
        return HR_ERR_PROTO;
    HR_CHECK(tcp_recv_all(fd, body, n, deadline));
    *len = n;
    return HR_OK;
}

static void reject(int fd, hr_status s, const char *why, double deadline) {
    (void)msg_send(fd, MSG_VERDICT, (int)s, why, strlen(why), deadline);
}

/* Session secrets derived from the key exchange, the transcript and the PSK. */
typedef struct {
    uint8_t th[32];   /* transcript hash */
    uint8_t i2r[32];  /* initiator -> responder frame key */
    uint8_t r2i[32];  /* responder -> initiator frame key */
    uint8_t conf[32]; /* confirmation key for the proofs */
} hs_keys;

static void derive(hs_keys *k, const sec_keys *keys, const uint8_t kx_i2r[32],
                   const uint8_t kx_r2i[32], const char *label, uint8_t out[32]) {
    crypto_generichash_state st;
    crypto_generichash_init(&st, keys->have_psk ? keys->psk : NULL, keys->have_psk ? 32 : 0, 32);
    crypto_generichash_update(&st, (const uint8_t *)label, strlen(label));
    crypto_generichash_update(&st, k->th, 32);
    crypto_generichash_update(&st, kx_i2r, 32);
    crypto_generichash_update(&st, kx_r2i, 32);
    crypto_generichash_final(&st, out, 32);
    sodium_memzero(&st, sizeof st);
}

static void proof_make(const hs_keys *k, const sec_keys *keys, int role, uint8_t out[SEC_PROOF]) {
    const char *label = role ? "hetring-proof-responder" : "hetring-proof-initiator";
    uint8_t m[64];
    size_t ll = strlen(label);
    memcpy(m, label, ll);
    memcpy(m + ll, k->th, 32);
    memset(out, 0, SEC_PROOF);
    if (keys->have_identity) crypto_sign_detached(out, NULL, m, ll + 32, keys->sign_sk);
    crypto_generichash(out + 64, 32, (const uint8_t *)label, ll, k->conf, 32);
}

static hr_status proof_check(const hs_keys *k, const sec_hs_params *p, long peer, int role,
                             const uint8_t in[SEC_PROOF], char *why, size_t whylen) {
    uint8_t want[SEC_PROOF];
    const char *label = role ? "hetring-proof-responder" : "hetring-proof-initiator";
    size_t ll = strlen(label);
    uint8_t m[64];
    memcpy(m, label, ll);
    memcpy(m + ll, k->th, 32);
    crypto_generichash(want + 64, 32, (const uint8_t *)label, ll, k->conf, 32);
    int mac_ok = sodium_memcmp(want + 64, in + 64, 32) == 0;
    sodium_memzero(want, sizeof want);
    if (p->keys->have_identity) {
        int idx = cfg_node_index(p->c, peer);
        if (idx < 0 || crypto_sign_verify_detached(in, m, ll + 32, p->c->nodes[idx].pubkey) != 0)
            return hr_fail(why, whylen, HR_ERR_AUTH,
                           "authentication failed: its signature does not match the pubkey "
                           "pinned for node %ld (wrong key file, or not that node)",
                           peer);
    }
    if (!mac_ok)
        return hr_fail(why, whylen, HR_ERR_AUTH,
                       "authentication failed: key confirmation does not match (%s)",
                       p->keys->have_psk ? "a different pre-shared key" : "tampered handshake");
    return HR_OK;
}

hr_status sec_handshake(int fd, int initiator, const sec_hs_params *p, double deadline,
                        sec_chan *ch, int *refused, char *err, size_t errlen) {
    const sec_keys *keys = p->keys;
    int secure = keys->mode != CFG_SEC_NONE;
    uint8_t eph_pk[crypto_kx_PUBLICKEYBYTES], eph_sk[crypto_kx_SECRETKEYBYTES];
    uint8_t mine[SEC_HELLO], theirs[SEC_HELLO], body[SEC_TEXT_MAX + 1];
    uint8_t kx_rx[32], kx_tx[32];
    hs_keys hk;
    hello o;
    char why[HR_ERRLEN] = "";
    hr_status st = HR_OK;
    int type, status;
    size_t blen;
    *refused = 0;
    memset(ch, 0, sizeof *ch);
    memset(&hk, 0, sizeof hk);
    if (secure) crypto_kx_keypair(eph_pk, eph_sk);
    hello_build(mine, p, initiator ? 0 : 1, secure ? eph_pk : NULL);

    if (initiator) {
        HR_CHECK_GOTO(tcp_send_all(fd, mine, SEC_HELLO, deadline), st, io);
        HR_CHECK_GOTO(tcp_recv_all(fd, theirs, SEC_HELLO, deadline), st, io);
    } else {
        HR_CHECK_GOTO(tcp_recv_all(fd, theirs, SEC_HELLO, deadline), st, io);
        HR_CHECK_GOTO(tcp_send_all(fd, mine, SEC_HELLO, deadline), st, io);
    }
    hello_parse(theirs, &o);
    if (initiator) {
        /* the responder's first message may be its refusal: report that, it says more */
        HR_CHECK_GOTO(msg_recv(fd, &type, &status, body, &blen, deadline), st, io);
        if (type == MSG_VERDICT && status != 0) goto refused;
    }
    st = hello_check(&o, mine, p, initiator ? 1 : 0, why, sizeof why);
    if (st != HR_OK) {
        if (!initiator) reject(fd, st, why, deadline);
        goto fail;
    }
    int aead = !secure               ? SEC_AEAD_NONE
               : (o.aes && mine[36]) ? SEC_AEAD_AES256GCM
                                     : SEC_AEAD_XCHACHA20;
    if (secure) {
        crypto_generichash_state hs;
        crypto_generichash_init(&hs, NULL, 0, 32);
        crypto_generichash_update(&hs, (const uint8_t *)"hetring-hs-v1", 13);
        crypto_generichash_update(&hs, initiator ? mine : theirs, SEC_HELLO);
        crypto_generichash_update(&hs, initiator ? theirs : mine, SEC_HELLO);
        crypto_generichash_final(&hs, hk.th, 32);
        int kx = initiator ? crypto_kx_client_session_keys(kx_rx, kx_tx, eph_pk, eph_sk, o.eph)
                           : crypto_kx_server_session_keys(kx_rx, kx_tx, eph_pk, eph_sk, o.eph);
        if (kx != 0) {
            st = hr_fail(why, sizeof why, HR_ERR_AUTH, "invalid ephemeral key");
            if (!initiator) reject(fd, st, why, deadline);
            goto fail;
        }
        const uint8_t *i2r = initiator ? kx_tx : kx_rx, *r2i = initiator ? kx_rx : kx_tx;
        derive(&hk, keys, i2r, r2i, "hetring-key-i2r", hk.i2r);
        derive(&hk, keys, i2r, r2i, "hetring-key-r2i", hk.r2i);
        derive(&hk, keys, i2r, r2i, "hetring-confirm", hk.conf);
    }

    uint8_t proof[SEC_PROOF];
    if (!initiator) {
        if (secure) {
            proof_make(&hk, keys, 1, proof);
            HR_CHECK_GOTO(msg_send(fd, MSG_PROOF, 0, proof, SEC_PROOF, deadline), st, io);
            HR_CHECK_GOTO(msg_recv(fd, &type, &status, body, &blen, deadline), st, io);
            if (type != MSG_PROOF) {
                st = hr_fail(why, sizeof why, HR_ERR_PROTO, "it sent no proof");
                goto fail;
            }
            st = proof_check(&hk, p, o.from, 0, body, why, sizeof why);
            if (st != HR_OK) {
                reject(fd, st, why, deadline);
                goto fail;
            }
        }
        HR_CHECK_GOTO(msg_send(fd, MSG_VERDICT, 0, NULL, 0, deadline), st, io);
    } else {
        if (type == MSG_PROOF && secure) {
            st = proof_check(&hk, p, o.from, 1, body, why, sizeof why);
            if (st != HR_OK) goto fail;
            proof_make(&hk, keys, 0, proof);
            HR_CHECK_GOTO(msg_send(fd, MSG_PROOF, 0, proof, SEC_PROOF, deadline), st, io);
            HR_CHECK_GOTO(msg_recv(fd, &type, &status, body, &blen, deadline), st, io);
        }
        if (type != MSG_VERDICT) {
            st = hr_fail(why, sizeof why, HR_ERR_PROTO, "unexpected handshake message");
            goto fail;
        }
        if (status != 0) {
        refused:
            body[blen] = 0;
            for (size_t i = 0; i < blen; i++)
                if (body[i] < 32 || body[i] > 126) body[i] = '?';
            *refused = 1;
            st = status < HR_STATUS_COUNT ? (hr_status)status : HR_ERR_PROTO;
            if (st == HR_OK) st = HR_ERR_PROTO;
            snprintf(why, sizeof why, "it refused this node: %s", (char *)body);
            goto fail;
        }
    }
    dir_init(&ch->tx, keys->mode, aead, initiator ? hk.i2r : hk.r2i);
    dir_init(&ch->rx, keys->mode, aead, initiator ? hk.r2i : hk.i2r);
    goto done;

io:
    if (st == HR_ERR_TIMEOUT)
        snprintf(why, sizeof why, "handshake timed out");
    else if (st == HR_ERR_PROTO)
        snprintf(why, sizeof why, "malformed handshake message");
    else
        snprintf(why, sizeof why, "connection lost during the handshake");
fail:
    hr_fail(err, errlen, st, "%s", why);
    sec_chan_free(ch);
done:
    sodium_memzero(eph_sk, sizeof eph_sk);
    sodium_memzero(kx_rx, sizeof kx_rx);
    sodium_memzero(kx_tx, sizeof kx_tx);
    sodium_memzero(&hk, sizeof hk);
    return st;
}
