/*
 * sec.c: keys, the handshake and frame sealing (see sec.h for the protocol).
 *
 * Invariants: every secret lives in a sec_keys or sec_chan (or on the stack of one function)
 * and is wiped with sodium_memzero when it is no longer needed; no secret reaches a log line or
 * an error message; a frame's plaintext reaches the caller only after its tag verified.
 */
#include "ring/sec.h"

#include "base/hr_file.h"
#include "base/hr_log.h"
#include "ring/bytes.h"
#include "ring/frame.h"
#include "ring/tcp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HS_MAGIC   0x53485248u /* "HRHS" */
#define HS_VERSION 3           /* 3: frame keys change every key window (sec.h) */

enum { MSG_PROOF = 1, MSG_VERDICT = 2 };

/* ================================================================ key files */

/* 64 hex digits (either case) into 32 bytes, in constant time. Returns 0 or -1. */
static int hex_key(const char hex[64], uint8_t out[32]) {
    size_t n = 0;
    const char *end = NULL;
    if (sodium_hex2bin(out, 32, hex, 64, NULL, &n, &end) != 0 || n != 32 || end != hex + 64) {
        sodium_memzero(out, 32);
        return -1;
    }
    return 0;
}

hr_status sec_read_key_file(const char *path, uint8_t out[32], char *err, size_t errlen) {
    /* opening a FIFO must not wait for a writer; only regular files are read */
    struct stat st;
    int fd = hr_file_open_read(path, &st);
    if (fd < 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG, "%s: cannot open key file: %s", path,
                       strerror(errno));
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: key file is not a regular file (it is a %s); refusing it (expected a "
                       "file as hetring keygen writes)",
                       path,
                       S_ISFIFO(st.st_mode)  ? "FIFO"
                       : S_ISDIR(st.st_mode) ? "directory"
                                             : "device or socket");
    }
    if (st.st_mode & 077) {
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
    if (nh != 64 || hex_key(hex, out) != 0)
        s = hr_fail(err, errlen, HR_ERR_CONFIG,
                    "%s: not a key file (expected 64 hex digits, as hetring keygen writes)", path);
    sodium_memzero(buf, sizeof buf);
    sodium_memzero(hex, sizeof hex);
    return s;
}

/* Write the key's text to the open file fd; closes fd. */
static hr_status write_key_text(int fd, const char *path, const uint8_t key[32],
                                const char *comment, char *err, size_t errlen) {
    if (fchmod(fd, 0600) != 0) {
        int e = errno;
        close(fd);
        return hr_fail(err, errlen, HR_ERR_IO, "%s: chmod 600: %s", path, strerror(e));
    }
    char text[256];
    char hex[65];
    sodium_bin2hex(hex, sizeof hex, key, 32);
    int len = snprintf(text, sizeof text, "# %s\n%s\n", comment, hex);
    ssize_t w = write(fd, text, (size_t)len);
    int e = errno;
    sodium_memzero(text, sizeof text);
    sodium_memzero(hex, sizeof hex);
    if (w != len || fsync(fd) != 0) {
        if (w == len) e = errno;
        close(fd);
        return hr_fail(err, errlen, HR_ERR_IO, "%s: write: %s", path,
                       strerror(w < 0 || w == len ? e : EIO));
    }
    if (close(fd) != 0) return hr_fail(err, errlen, HR_ERR_IO, "%s: close failed", path);
    return HR_OK;
}

hr_status sec_write_key_file(const char *path, const uint8_t key[32], const char *comment,
                             int force, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return hr_fail(err, errlen, HR_ERR_IO,
                       "%s: is a directory (expected a file name for the key, e.g. "
                       "%s/node0.key)",
                       path, path);
    /* without --force: created here or not at all (O_EXCL), and removed again if it could not
     * be written whole; with it: written beside the file PATH leads to (hr_file_target: a link
     * is kept, as for a checkpoint) and renamed over that file, so the key it replaces stays
     * until the new one is complete (a full disk never leaves a node without either). Either
     * way the file is created 0600 by open itself, never readable by others for a moment. */
    char tmp[4200], real[4096];
    const char *target = path;
    if (force) {
        if (hr_file_target(path, real, sizeof real) != 0)
            return hr_fail(err, errlen, HR_ERR_IO, "%s: cannot follow its link: %s", path,
                           strerror(errno));
        if (hr_file_tmp_name(tmp, sizeof tmp, real) != 0)
            return hr_fail(err, errlen, HR_ERR_IO, "%s: name too long", path);
        hr_file_remove_stale(real, HR_SUB_SEC, "key write");
        target = tmp;
    }
    int fd = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return hr_fail(err, errlen, HR_ERR_IO, "%s: cannot create key file: %s%s", path,
                       strerror(errno), errno == EEXIST ? " (use --force to replace it)" : "");
    hr_status st = write_key_text(fd, path, key, comment, err, errlen);
    if (st != HR_OK) {
        unlink(target);
        return st;
    }
    int e = force ? hr_file_replace(tmp, real) : 0;
    if (e) return hr_fail(err, errlen, HR_ERR_IO, "%s: cannot replace it: %s", path, strerror(e));
    return HR_OK;
}

void sec_identity_public(const uint8_t seed[32], uint8_t pk[32]) {
    uint8_t sk[crypto_sign_SECRETKEYBYTES];
    crypto_sign_seed_keypair(pk, sk, seed);
    sodium_memzero(sk, sizeof sk);
}

hr_status sec_keys_load(sec_keys *k, const ring_config *rc, char *err, size_t errlen) {
    memset(k, 0, sizeof *k);
    k->mode = rc->security;
    if (k->mode != RING_SEC_NONE && k->mode != RING_SEC_AUTH && k->mode != RING_SEC_ENCRYPT)
        return hr_fail(err, errlen, HR_ERR_INVAL, "security mode %d is not none, auth or encrypt",
                       k->mode);
    if (k->mode == RING_SEC_NONE) return HR_OK;
    if (sodium_init() < 0) return hr_fail(err, errlen, HR_ERR_IO, "libsodium failed to start");
    /* test hook: smaller key windows (never larger), so that a test crosses many */
    const char *win = getenv("HETRING_TEST_KEY_WINDOW");
    if (win && *win) {
        char *end;
        long w = strtol(win, &end, 10);
        if (*end || end == win || w < 1 || w > 63)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "node %ld: HETRING_TEST_KEY_WINDOW=%s: expected 1 to 63", rc->self_id,
                           win);
        k->window_log2 = (int)w;
        HR_WARN(SEC,
                "HETRING_TEST_KEY_WINDOW=%s: frame keys change every %llu frames at most "
                "(a test hook)",
                win, 1ull << w);
    }
    hr_status st;
    long self_id = rc->self_id;
    if (rc->key_file[0]) {
        const char *path = rc->key_file;
        uint8_t seed[32];
        HR_CHECK_GOTO(sec_read_key_file(path, seed, err, errlen), st, fail);
        crypto_sign_seed_keypair(k->sign_pk, k->sign_sk, seed);
        sodium_memzero(seed, sizeof seed);
        k->have_identity = 1;
        int idx = ring_config_index(rc, self_id);
        if (idx < 0 || !rc->members[idx].has_pubkey ||
            sodium_memcmp(rc->members[idx].pubkey, k->sign_pk, 32) != 0) {
            char hex[65];
            sodium_bin2hex(hex, sizeof hex, k->sign_pk, 32);
            st = hr_fail(err, errlen, HR_ERR_CONFIG,
                         "%s: this key's public key %s is not the pubkey pinned for [node.%ld] "
                         "in %s (fix the pubkey or use the right key file)",
                         path, hex, self_id, rc->label[0] ? rc->label : "the config");
            goto fail;
        }
    }
    if (rc->psk_file[0]) {
        HR_CHECK_GOTO(sec_read_key_file(rc->psk_file, k->psk, err, errlen), st, fail);
        k->have_psk = 1;
    } else if (rc->has_psk) {
        memcpy(k->psk, rc->psk, 32);
        k->have_psk = 1;
    }
    if (!k->have_identity && !k->have_psk) {
        st = hr_fail(err, errlen, HR_ERR_CONFIG,
                     "security = %s needs keys (key_file with a pubkey per node, or psk_file)",
                     ring_security_name(k->mode));
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

unsigned sec_window_shift(uint32_t seg_bytes) {
    uint64_t frame = FRAME_HDR + (uint64_t)seg_bytes + 64 + SEC_TAG;
    unsigned log2 = 0; /* ceil(log2(frame)) */
    while ((1ull << log2) < frame) log2++;
    return log2 >= SEC_WINDOW_LOG2 ? 0 : SEC_WINDOW_LOG2 - log2;
}

/* The key of window `w`: BLAKE2b keyed with the direction's key, the window as subkey id. */
static void window_key(const sec_dir *d, uint64_t w, uint8_t key[32]) {
    crypto_kdf_derive_from_key(key, 32, w, "hrwindow", d->base);
}

/* Make `st` hold the frame keys of window `w` of `d` (its key, or its expanded AES key). */
static void window_state(const sec_dir *d, uint64_t w, sec_dir *st) {
    uint8_t key[32];
    window_key(d, w, key);
    if (d->aead == SEC_AEAD_AES256GCM)
        crypto_aead_aes256gcm_beforenm(&st->aes, key);
    else
        memcpy(st->key, key, 32);
    st->win = w;
    sodium_memzero(key, sizeof key);
}

void sec_dir_init(sec_dir *d, int mode, int aead, const uint8_t key[32], unsigned shift) {
    memset(d, 0, sizeof *d);
    d->mode = mode;
    d->aead = aead;
    d->shift = shift > 63 ? 63 : shift;
    if (mode == RING_SEC_NONE) return;
    memcpy(d->base, key, 32);
    window_state(d, 0, d);
}

void sec_dir_sync(sec_dir *d) {
    uint64_t w = d->ctr >> d->shift;
    if (d->mode != RING_SEC_NONE && w != d->win) window_state(d, w, d);
}

/* The keys that seal and open frame `ctr` of `d`: d's own for a frame of its window, else
 * `tmp`'s, made for the frame (the caller wipes it). */
static const sec_dir *frame_keys(const sec_dir *d, uint64_t ctr, sec_dir *tmp) {
    uint64_t w = ctr >> d->shift;
    if (w == d->win) return d;
    tmp->mode = d->mode;
    tmp->aead = d->aead;
    window_state(d, w, tmp);
    return tmp;
}

static void nonce_of(uint64_t ctr, uint8_t n[24]) {
    memset(n, 0, 24);
    for (int i = 0; i < 8; i++) n[i] = (uint8_t)(ctr >> (8 * i));
}

void sec_seal(sec_dir *d, uint8_t *frame, const uint8_t *src, size_t len) {
    sec_dir_sync(d);
    sec_seal_at(d, d->ctr++, frame, src, len);
}

int sec_open(sec_dir *d, uint8_t *frame, size_t len, uint8_t *dst) {
    sec_dir_sync(d);
    return sec_open_at(d, d->ctr++, frame, len, dst);
}

/* Seal frame `ctr` with the keys of its window, `d`. */
static void seal_with(const sec_dir *d, uint64_t ctr, uint8_t *frame, const uint8_t *src,
                      size_t len) {
    uint8_t n[24], dummy = 0;
    uint8_t *pay = frame + FRAME_HDR, *tag = pay + len;
    nonce_of(ctr, n);
    if (d->mode == RING_SEC_AUTH) {
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

void sec_seal_at(const sec_dir *d, uint64_t ctr, uint8_t *frame, const uint8_t *src, size_t len) {
    sec_dir tmp;
    const sec_dir *k = frame_keys(d, ctr, &tmp);
    seal_with(k, ctr, frame, src, len);
    if (k == &tmp) sodium_memzero(&tmp, sizeof tmp);
}

/* Open frame `ctr` with the keys of its window, `d`. */
static int open_with(const sec_dir *d, uint64_t ctr, uint8_t *frame, size_t len, uint8_t *dst) {
    uint8_t n[24], dummy = 0;
    uint8_t *pay = frame + FRAME_HDR, *tag = pay + len;
    int rc;
    nonce_of(ctr, n);
    if (d->mode == RING_SEC_AUTH) {
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

int sec_open_at(const sec_dir *d, uint64_t ctr, uint8_t *frame, size_t len, uint8_t *dst) {
    sec_dir tmp;
    const sec_dir *k = frame_keys(d, ctr, &tmp);
    int rc = open_with(k, ctr, frame, len, dst);
    if (k == &tmp) sodium_memzero(&tmp, sizeof tmp);
    return rc;
}

/* ================================================================ handshake */

/* Hello layout: 0 magic u32 | 4 version u16 | 6 role u8 | 7 mode u8 | 8 epoch u64 | 16 from i64 |
 * 24 to i64 | 32 seg u32 | 36 aes u8 | 37 link u8 | 38 key window shift u8 |
 * 40 tree_bytes u32 | 64 ephemeral pk (32) |
 * 96 name hash (32) | 128 name prefix (64, for messages). */
typedef struct {
    uint32_t seg, tree_bytes;
    int version, role, mode, aes, link, shift;
    uint64_t epoch;
    long from, to;
    const uint8_t *eph, *name_hash;
    char name[65];
} hello;

/* The key window shift of this node's links (sec_window_shift, or the test hook's if smaller). */
static unsigned hs_shift(const sec_hs_params *p) {
    unsigned s = sec_window_shift(p->seg_bytes);
    int t = p->keys->window_log2;
    return t > 0 && (unsigned)t < s ? (unsigned)t : s;
}

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
    h[36] = p->keys->mode == RING_SEC_NONE ? 0 : (uint8_t)crypto_aead_aes256gcm_is_available();
    h[37] = (uint8_t)p->link;
    h[38] = (uint8_t)hs_shift(p);
    le_put32(h + 40, p->tree_bytes);
    if (eph) memcpy(h + 64, eph, 32);
    crypto_generichash(h + 96, 32, (const uint8_t *)p->rc->name, strlen(p->rc->name), NULL, 0);
    memcpy(h + 128, p->rc->name, strnlen(p->rc->name, 63));
}

static void hello_parse(const uint8_t h[SEC_HELLO], hello *o) {
    o->version = h[4] | (h[5] << 8);
    o->role = h[6];
    o->mode = h[7];
    o->epoch = le_get64(h + 8);
    o->from = (long)le_get64(h + 16);
    o->to = (long)le_get64(h + 24);
    o->seg = le_get32(h + 32);
    o->aes = h[36];
    o->link = h[37];
    o->shift = h[38];
    o->tree_bytes = le_get32(h + 40);
    o->eph = h + 64;
    o->name_hash = h + 96;
    memcpy(o->name, h + 128, 64);
    o->name[64] = 0;
    for (char *q = o->name; *q; q++)
        if (*q < 32 || *q > 126) *q = '?';
}

/* Does the other end speak this protocol version? (Its magic was checked as it arrived,
 * hs_recv_hello.) */
static hr_status hello_speaks(const hello *o, char *why, size_t whylen) {
    if (o->version != HS_VERSION)
        return hr_fail(why, whylen, HR_ERR_PROTO, "protocol version %d, this node speaks %d",
                       o->version, HS_VERSION);
    return HR_OK;
}

/* Is `o` a lobby hello that this end takes (as responder, with accept_lobby)? */
static int hello_lobby(const hello *o, const sec_hs_params *p, int want_role) {
    return o->epoch == SEC_EPOCH_LOBBY && p->accept_lobby && want_role == 0 /* initiator's */;
}

/* Check the other end's hello against ours; the reason goes to `why`. */
static hr_status hello_check(const hello *o, const uint8_t mine[SEC_HELLO], const sec_hs_params *p,
                             int want_role, char *why, size_t whylen) {
    HR_CHECK(hello_speaks(o, why, whylen));
    if (o->role != want_role)
        return hr_fail(why, whylen, HR_ERR_PROTO, "unexpected handshake role");
    if (sodium_memcmp(o->name_hash, mine + 96, 32) != 0)
        return hr_fail(why, whylen, HR_ERR_PROTO, "cluster name '%s' differs from '%s'", o->name,
                       p->rc->name);
    if (o->mode != p->keys->mode)
        return hr_fail(why, whylen, HR_ERR_PROTO, "security = %s differs from this node's %s",
                       ring_security_name(o->mode), ring_security_name(p->keys->mode));
    int idx = ring_config_index(p->rc, o->from);
    if (idx < 0)
        return hr_fail(why, whylen, HR_ERR_AUTH, "unknown peer: node id %ld is not in the cluster",
                       o->from);
    int lobby = hello_lobby(o, p, want_role);
    if (o->link != SEC_LINK_RING && o->link != SEC_LINK_TREE)
        return hr_fail(why, whylen, HR_ERR_PROTO, "unknown link kind %d", o->link);
    /* a responder answers a tree hello with one (hs_hellos_responder); the initiator asked */
    int tree = o->link == SEC_LINK_TREE;
    if (!lobby && want_role == 1 && tree != (p->link == SEC_LINK_TREE))
        return hr_fail(why, whylen, HR_ERR_PROTO, "it answered a %s link as a %s link",
                       p->link == SEC_LINK_TREE ? "tree" : "ring", tree ? "tree" : "ring");
    long expect = want_role == 0 && tree ? (p->tree ? p->expect_tree_id : -1) : p->expect_id;
    if (lobby && o->from == p->self_id)
        return hr_fail(why, whylen, HR_ERR_PROTO, "a lobby call claims this node's own id %ld",
                       o->from);
    if (!lobby && p->expect_id < 0)
        return hr_fail(why, whylen, HR_ERR_VIEW,
                       "no view is forming at node %ld (only lobby calls are taken now)",
                       p->self_id);
    if (!lobby && expect < 0)
        return hr_fail(why, whylen, HR_ERR_VIEW,
                       "node %ld has no tree parent in view epoch %llu (a tree link from node %ld)",
                       p->self_id, (unsigned long long)p->epoch, o->from);
    if (!lobby && o->from != expect)
        return hr_fail(why, whylen, HR_ERR_VIEW,
                       "node %ld is not the expected %s (node %ld) in view epoch %llu", o->from,
                       tree ? "tree neighbour" : "neighbour", expect,
                       (unsigned long long)p->epoch);
    if (o->to != p->self_id)
        return hr_fail(why, whylen, HR_ERR_PROTO, "it wanted node %ld, this is node %ld", o->to,
                       p->self_id);
    if (!lobby && o->epoch != p->epoch)
        return hr_fail(why, whylen, HR_ERR_VIEW, "view epoch %llu differs from this node's %llu",
                       (unsigned long long)o->epoch, (unsigned long long)p->epoch);
    if (o->seg != p->seg_bytes)
        return hr_fail(why, whylen, HR_ERR_PROTO, "segment_bytes %u differs from this node's %u",
                       o->seg, p->seg_bytes);
    if (o->tree_bytes != p->tree_bytes)
        return hr_fail(why, whylen, HR_ERR_PROTO, "tree_bytes %u differs from this node's %u",
                       o->tree_bytes, p->tree_bytes);
    if (p->keys->mode != RING_SEC_NONE && o->shift != (int)hs_shift(p))
        return hr_fail(why, whylen, HR_ERR_PROTO,
                       "key windows of 2^%d frames differ from this node's 2^%u (is "
                       "HETRING_TEST_KEY_WINDOW set on one node only?)",
                       o->shift, hs_shift(p));
    if (p->keys->have_identity && !p->rc->members[idx].has_pubkey)
        return hr_fail(why, whylen, HR_ERR_AUTH, "unknown peer: node %ld has no pinned pubkey",
                       o->from);
    return HR_OK;
}

/* A handshake message after the hellos. */
typedef struct {
    int type;                       /* MSG_PROOF or MSG_VERDICT */
    int status;                     /* a verdict's: 0 accepted, else the refusal's hr_status */
    size_t len;                     /* bytes in body */
    uint8_t body[SEC_TEXT_MAX + 1]; /* a proof, or a refusal's text (NUL-terminated, printable) */
} hs_msg;

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

/* Receive one message. Type, reserved bytes and length are checked before the body is read;
 * HR_ERR_PROTO with `why` set when they are wrong. */
static hr_status msg_recv(int fd, hs_msg *m, double deadline, char *why, size_t whylen) {
    uint8_t h[SEC_MSG_HDR];
    HR_CHECK(tcp_recv_all(fd, h, sizeof h, deadline));
    m->type = h[0];
    m->status = h[1];
    uint32_t n = le_get32(h + 4);
    int well_formed = h[2] == 0 && h[3] == 0 &&
                      ((m->type == MSG_PROOF && m->status == 0 && n == SEC_PROOF) ||
                       (m->type == MSG_VERDICT && n <= SEC_TEXT_MAX));
    if (!well_formed)
        return hr_fail(why, whylen, HR_ERR_PROTO,
                       "malformed handshake message (type %d, status %d, %u bytes)", m->type,
                       m->status, n);
    HR_CHECK(tcp_recv_all(fd, m->body, n, deadline));
    m->len = n;
    m->body[n] = 0;
    if (m->type == MSG_VERDICT)
        for (size_t i = 0; i < n; i++)
            if (m->body[i] < 32 || m->body[i] > 126) m->body[i] = '?';
    return HR_OK;
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
        int idx = ring_config_index(p->rc, peer);
        if (idx < 0 || crypto_sign_verify_detached(in, m, ll + 32, p->rc->members[idx].pubkey) != 0)
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

/* ---------------------------------------------------------------- the two roles
 * Each role is a straight line of steps; a step either succeeds or ends the handshake with
 * `why` set. The only `return HR_OK` of a role comes after the other end's hello checked out
 * and, in auth and encrypt modes, after its proof verified: no path accepts a peer that has
 * not proved who it is. */

enum { ROLE_INITIATOR = 0, ROLE_RESPONDER = 1 };

/* One handshake in progress; wiped when it ends. */
typedef struct {
    const sec_hs_params *p;                   /* what both ends must agree on */
    int fd;                                   /* the connection */
    double deadline;                          /* for the whole handshake */
    int secure;                               /* auth or encrypt: both ends prove who they are */
    uint8_t eph_pk[crypto_kx_PUBLICKEYBYTES]; /* this end's ephemeral X25519 key pair */
    uint8_t eph_sk[crypto_kx_SECRETKEYBYTES];
    uint8_t mine[SEC_HELLO];   /* this end's hello */
    uint8_t theirs[SEC_HELLO]; /* the other end's hello */
    hello o;                   /* theirs, parsed */
    hs_keys k;                 /* transcript hash and session keys (secure modes) */
    int refused;               /* the other end's verdict refused this node */
    char why[HR_ERRLEN];       /* what went wrong */
} hs_state;

/* A transport failure, in words. */
static hr_status hs_io(hs_state *h, hr_status st) {
    if (st == HR_ERR_PROTO) return st; /* msg_recv already said what was malformed */
    return hr_fail(h->why, sizeof h->why, st, "%s",
                   st == HR_ERR_TIMEOUT ? "handshake timed out"
                                        : "connection lost during the handshake");
}

/* Tell the other end why it is refused (best effort: it may be gone already). */
static hr_status hs_refuse(hs_state *h, hr_status st) {
    (void)msg_send(h->fd, MSG_VERDICT, (int)st, h->why, strlen(h->why), h->deadline);
    return st;
}

/* Read the other end's hello, its magic first: something that is not a hetring node (an HTTP
 * probe, a port scanner, TLS) is told apart as soon as it sends 4 bytes, with what they were,
 * rather than as a timeout when it sends fewer than a hello and waits. */
static hr_status hs_recv_hello(hs_state *h) {
    hr_status st = tcp_recv_all(h->fd, h->theirs, 4, h->deadline);
    if (st == HR_OK && le_get32(h->theirs) != HS_MAGIC) {
        char began[20] = "", *q = began;
        for (int i = 0; i < 4; i++) {
            uint8_t c = h->theirs[i];
            q += c >= 32 && c < 127 && c != '"' && c != '\\' ? sprintf(q, "%c", c)
                                                             : sprintf(q, "\\x%02x", c);
        }
        return hr_fail(h->why, sizeof h->why, HR_ERR_PROTO,
                       "not a hetring peer (bad handshake magic: it began with \"%s\")", began);
    }
    if (st == HR_OK) st = tcp_recv_all(h->fd, h->theirs + 4, SEC_HELLO - 4, h->deadline);
    if (st != HR_OK) return hs_io(h, st);
    hello_parse(h->theirs, &h->o);
    return HR_OK;
}

/* Initiator: send this end's hello, then read the responder's. */
static hr_status hs_hellos_initiator(hs_state *h) {
    hr_status st = tcp_send_all(h->fd, h->mine, SEC_HELLO, h->deadline);
    return st == HR_OK ? hs_recv_hello(h) : hs_io(h, st);
}

/* Responder: read the initiator's hello first; a lobby call is answered with a lobby hello
 * addressed to the caller (the transcript covers it like any hello). */
static hr_status hs_hellos_responder(hs_state *h) {
    HR_CHECK(hs_recv_hello(h));
    if (hello_lobby(&h->o, h->p, ROLE_INITIATOR)) {
        le_put64(h->mine + 8, SEC_EPOCH_LOBBY);
        le_put64(h->mine + 24, (uint64_t)h->o.from);
    } else if (h->o.link == SEC_LINK_TREE && h->p->tree) {
        h->mine[37] = SEC_LINK_TREE;
        le_put64(h->mine + 24, (uint64_t)h->p->expect_tree_id);
    }
    hr_status st = tcp_send_all(h->fd, h->mine, SEC_HELLO, h->deadline);
    return st == HR_OK ? HR_OK : hs_io(h, st);
}

/* Receive the next message; a refusal ends the handshake with the other end's reason. */
static hr_status hs_recv(hs_state *h, hs_msg *m) {
    hr_status st = msg_recv(h->fd, m, h->deadline, h->why, sizeof h->why);
    if (st != HR_OK) return hs_io(h, st);
    if (m->type != MSG_VERDICT || m->status == 0) return HR_OK;
    h->refused = 1;
    st = m->status < HR_STATUS_COUNT ? (hr_status)m->status : HR_ERR_PROTO;
    return hr_fail(h->why, sizeof h->why, st, "it refused this node: %s", (const char *)m->body);
}

/* The message received must be the one the protocol expects now. A verdict where a proof is
 * due is a peer skipping authentication. */
static hr_status hs_want(hs_state *h, const hs_msg *m, int type) {
    if (m->type == type) return HR_OK;
    if (type == MSG_PROOF)
        return hr_fail(h->why, sizeof h->why, HR_ERR_AUTH,
                       "authentication failed: it sent no proof of its identity");
    return hr_fail(h->why, sizeof h->why, HR_ERR_PROTO,
                   "handshake message out of order: a proof where the verdict was due");
}

/* Transcript hash and session keys, from both hellos and the ephemeral exchange. */
static hr_status hs_derive(hs_state *h, int role) {
    const uint8_t *hello_i = role == ROLE_INITIATOR ? h->mine : h->theirs;
    const uint8_t *hello_r = role == ROLE_INITIATOR ? h->theirs : h->mine;
    crypto_generichash_state t;
    crypto_generichash_init(&t, NULL, 0, 32);
    crypto_generichash_update(&t, (const uint8_t *)"hetring-hs-v1", 13);
    crypto_generichash_update(&t, hello_i, SEC_HELLO);
    crypto_generichash_update(&t, hello_r, SEC_HELLO);
    crypto_generichash_final(&t, h->k.th, 32);
    uint8_t rx[32], tx[32];
    int kx = role == ROLE_INITIATOR
                 ? crypto_kx_client_session_keys(rx, tx, h->eph_pk, h->eph_sk, h->o.eph)
                 : crypto_kx_server_session_keys(rx, tx, h->eph_pk, h->eph_sk, h->o.eph);
    hr_status st = HR_OK;
    if (kx != 0) {
        st = hr_fail(h->why, sizeof h->why, HR_ERR_AUTH, "invalid ephemeral key");
    } else {
        const uint8_t *i2r = role == ROLE_INITIATOR ? tx : rx;
        const uint8_t *r2i = role == ROLE_INITIATOR ? rx : tx;
        derive(&h->k, h->p->keys, i2r, r2i, "hetring-key-i2r", h->k.i2r);
        derive(&h->k, h->p->keys, i2r, r2i, "hetring-key-r2i", h->k.r2i);
        derive(&h->k, h->p->keys, i2r, r2i, "hetring-confirm", h->k.conf);
    }
    sodium_memzero(rx, sizeof rx);
    sodium_memzero(tx, sizeof tx);
    return st;
}

static hr_status hs_send_proof(hs_state *h, int role) {
    uint8_t proof[SEC_PROOF];
    proof_make(&h->k, h->p->keys, role, proof);
    hr_status st = msg_send(h->fd, MSG_PROOF, 0, proof, SEC_PROOF, h->deadline);
    return st == HR_OK ? HR_OK : hs_io(h, st);
}

/* Check the other end's proof (it plays `role`); refuse it when it does not verify. */
static hr_status hs_check_proof(hs_state *h, int role, const hs_msg *m) {
    hr_status st = proof_check(&h->k, h->p, h->o.from, role, m->body, h->why, sizeof h->why);
    return st == HR_OK ? HR_OK : hs_refuse(h, st);
}

/* The connecting end: hellos; the responder's proof (or its refusal); this end's proof; the
 * verdict. */
static hr_status hs_initiator(hs_state *h) {
    hs_msg m;
    hr_status st;
    HR_CHECK(hs_hellos_initiator(h));
    /* Fail at once on a stranger rather than wait for a message it will never send. */
    st = hello_speaks(&h->o, h->why, sizeof h->why);
    if (st != HR_OK) return st;
    /* The responder's next message may refuse this node's hello: report that, it says more
     * than this end's own check of the responder's hello. */
    HR_CHECK(hs_recv(h, &m));
    st = hello_check(&h->o, h->mine, h->p, ROLE_RESPONDER, h->why, sizeof h->why);
    if (st != HR_OK) return hs_refuse(h, st);
    if (!h->secure) return hs_want(h, &m, MSG_VERDICT);
    st = hs_want(h, &m, MSG_PROOF);
    if (st == HR_OK) st = hs_derive(h, ROLE_INITIATOR);
    if (st != HR_OK) return hs_refuse(h, st);
    HR_CHECK(hs_check_proof(h, ROLE_RESPONDER, &m));
    HR_CHECK(hs_send_proof(h, ROLE_INITIATOR));
    HR_CHECK(hs_recv(h, &m));
    return hs_want(h, &m, MSG_VERDICT);
}

/* The accepting end: hellos; this end's proof; the initiator's proof (or its refusal); the
 * verdict. */
static hr_status hs_responder(hs_state *h) {
    hs_msg m;
    hr_status st;
    HR_CHECK(hs_hellos_responder(h));
    st = hello_check(&h->o, h->mine, h->p, ROLE_INITIATOR, h->why, sizeof h->why);
    if (st == HR_OK && h->secure) st = hs_derive(h, ROLE_RESPONDER);
    if (st != HR_OK) return hs_refuse(h, st);
    if (h->secure) {
        HR_CHECK(hs_send_proof(h, ROLE_RESPONDER));
        HR_CHECK(hs_recv(h, &m));
        st = hs_want(h, &m, MSG_PROOF);
        if (st != HR_OK) return hs_refuse(h, st);
        HR_CHECK(hs_check_proof(h, ROLE_INITIATOR, &m));
    }
    st = msg_send(h->fd, MSG_VERDICT, 0, NULL, 0, h->deadline);
    return st == HR_OK ? HR_OK : hs_io(h, st);
}

hr_status sec_handshake(int fd, int initiator, const sec_hs_params *p, double deadline,
                        sec_chan *ch, int *refused, char *err, size_t errlen) {
    int role = initiator ? ROLE_INITIATOR : ROLE_RESPONDER;
    hs_state h = {.p = p, .fd = fd, .deadline = deadline, .secure = p->keys->mode != RING_SEC_NONE};
    memset(ch, 0, sizeof *ch);
    if (h.secure) crypto_kx_keypair(h.eph_pk, h.eph_sk);
    hello_build(h.mine, p, role, h.secure ? h.eph_pk : NULL);
    hr_status st = role == ROLE_INITIATOR ? hs_initiator(&h) : hs_responder(&h);
    *refused = h.refused;
    if (st == HR_OK) {
        int aead = !h.secure                 ? SEC_AEAD_NONE
                   : (h.o.aes && h.mine[36]) ? SEC_AEAD_AES256GCM
                                             : SEC_AEAD_XCHACHA20;
        unsigned shift = hs_shift(p);
        sec_dir_init(&ch->tx, p->keys->mode, aead, initiator ? h.k.i2r : h.k.r2i, shift);
        sec_dir_init(&ch->rx, p->keys->mode, aead, initiator ? h.k.r2i : h.k.i2r, shift);
        if (p->peer) {
            p->peer->id = h.o.from;
            p->peer->lobby = h.o.epoch == SEC_EPOCH_LOBBY;
            p->peer->tree = h.o.link == SEC_LINK_TREE;
        }
    } else {
        hr_fail(err, errlen, st, "%s", h.why);
    }
    sodium_memzero(&h, sizeof h);
    return st;
}
