/*
 * test_handshake.c: the handshake against a fake peer that cheats.
 *
 * The fake is written here from the protocol in sec.h, with libsodium and nothing of sec.c, so
 * it can do what a real node never would: skip its proof, sign with another node's key, claim
 * an id the INI does not list, replay a recorded transcript, send messages out of turn, cut a
 * message short or stall. Every cheat must end the real side's handshake as a failure with a
 * reason and a wiped channel, before the deadline; the honest fake must succeed, with the same
 * keys on both ends (otherwise the failures could come from a broken fake).
 *
 * Part 1 drives sec_handshake over a socketpair, in both roles, in encrypt mode (identity keys)
 * and auth mode (a PSK). Part 2 runs ring_init on loopback against a fake node 1 and checks
 * that the errors name the address the cheat came from.
 */
#include "cluster/ring_setup.h"
#include "conf/cfg.h"
#include "ring/bytes.h"
#include "ring/ring.h"
#include "ring/sec.h"
#include "ring/tcp.h"
#include "tests/check.h"
#include "tests/ports.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* ================================================================ the wire, as sec.h gives it */

#define HELLO      SEC_HELLO
#define MAGIC      0x53485248u
#define MSG_PROOF  1
#define MSG_VERDIC 2
#define SEG        65536u
#define TREE       4096u

enum { INITIATOR = 0, RESPONDER = 1 };

/* What the fake does instead of (or besides) following the protocol. */
typedef enum {
    FK_HONEST,           /* follows the protocol */
    FK_VERDICT_NO_PROOF, /* answers "ok" where its proof is due */
    FK_TWO_PROOFS,       /* responder: a second proof where the verdict is due */
    FK_CUT_HELLO,        /* 100 bytes of its hello, then closes */
    FK_STALL_HELLO,      /* 100 bytes of its hello, then silence */
    FK_CUT_PROOF,        /* the proof's header and 40 bytes, then closes */
    FK_OVERSIZE,         /* a message header announcing 5000 bytes */
    FK_RESERVED,         /* a proof whose reserved header bytes are set */
    FK_GARBAGE,          /* random bytes for a hello */
    FK_HTTP,             /* an HTTP request (18 bytes) for a hello, then silence */
    FK_ZERO_EPH,         /* an all-zero ephemeral key */
    FK_REFUSE,           /* responder: refuses the initiator ("go away") */
    FK_REPLAY,           /* sends a hello and proof recorded from an earlier session */
} fk_script;

typedef struct {
    int role;               /* the fake's */
    int wrong_role;         /* its hello claims the other role */
    fk_script script;       /* how it cheats */
    int mode;               /* RING_SEC_* in its hello */
    long from, to;          /* ids in its hello */
    uint64_t epoch;         /* view epoch in its hello */
    uint32_t seg;           /* segment size in its hello */
    uint32_t tree_bytes;    /* tree_bytes in its hello */
    int link;               /* link kind in its hello (SEC_LINK_*) */
    int version;            /* protocol version in its hello, 0: this one's */
    int shift;              /* key window shift in its hello, -1: sec_window_shift(seg) */
    const char *name;       /* cluster name in its hello */
    const uint8_t *sign_sk; /* identity it signs with (64 bytes), NULL: zeros */
    const uint8_t *psk;     /* pre-shared key (32 bytes), NULL: none */
    const uint8_t *peer_pk; /* the real node's pinned identity (32 bytes), NULL: none */
    int fd;                 /* its end of the connection */
    /* recording and replay of its hello and proof message */
    int record;
    uint8_t rec_hello[HELLO], rec_proof[SEC_MSG_HDR + SEC_PROOF];
    /* what it saw and derived */
    int verdict;                 /* status of the verdict it received, -1 none */
    int proof_ok;                /* the real node's proof verified (identity of node 0, PSK) */
    char text[SEC_TEXT_MAX + 1]; /* that verdict's text */
    uint8_t i2r[32], r2i[32];    /* frame keys it derived */
} fake;

static int fk_send(int fd, const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int fk_recv(int fd, void *buf, size_t n) {
    uint8_t *p = buf;
    while (n) {
        ssize_t r = recv(fd, p, n, 0);
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int fk_msg(int fd, int type, int status, const void *body, size_t len) {
    uint8_t b[SEC_MSG_HDR + SEC_TEXT_MAX] = {(uint8_t)type, (uint8_t)status};
    le_put32(b + 4, (uint32_t)len);
    if (len) memcpy(b + SEC_MSG_HDR, body, len);
    return fk_send(fd, b, SEC_MSG_HDR + len);
}

/* Read one message; a verdict's status and text are kept. Returns its type, or -1. */
static int fk_read_msg(fake *f, uint8_t body[SEC_TEXT_MAX]) {
    uint8_t h[SEC_MSG_HDR];
    if (fk_recv(f->fd, h, sizeof h) != 0) return -1;
    uint32_t n = le_get32(h + 4);
    if (n > SEC_TEXT_MAX || fk_recv(f->fd, body, n) != 0) return -1;
    if (h[0] == MSG_VERDIC) {
        f->verdict = h[1];
        memcpy(f->text, body, n);
        f->text[n] = 0;
    }
    return h[0];
}

static void fk_hello(const fake *f, uint8_t h[HELLO], const uint8_t eph[32]) {
    memset(h, 0, HELLO);
    le_put32(h, MAGIC);
    h[4] = (uint8_t)(f->version ? f->version : 3);
    h[6] = (uint8_t)(f->role ^ f->wrong_role);
    h[7] = (uint8_t)f->mode;
    le_put64(h + 8, f->epoch);
    le_put64(h + 16, (uint64_t)f->from);
    le_put64(h + 24, (uint64_t)f->to);
    le_put32(h + 32, f->seg);
    h[37] = (uint8_t)f->link;
    h[38] = (uint8_t)(f->shift >= 0 ? (unsigned)f->shift : sec_window_shift(f->seg));
    le_put32(h + 40, f->tree_bytes);
    memcpy(h + 64, eph, 32);
    crypto_generichash(h + 96, 32, (const uint8_t *)f->name, strlen(f->name), NULL, 0);
    memcpy(h + 128, f->name, strnlen(f->name, 63));
}

/* Transcript hash, frame keys and confirmation key, as sec.h describes them. */
static void fk_keys(fake *f, const uint8_t hi[HELLO], const uint8_t hr[HELLO], const uint8_t pk[32],
                    const uint8_t sk[32], const uint8_t peer[32], uint8_t th[32],
                    uint8_t conf[32]) {
    crypto_generichash_state s;
    crypto_generichash_init(&s, NULL, 0, 32);
    crypto_generichash_update(&s, (const uint8_t *)"hetring-hs-v1", 13);
    crypto_generichash_update(&s, hi, HELLO);
    crypto_generichash_update(&s, hr, HELLO);
    crypto_generichash_final(&s, th, 32);
    uint8_t rx[32], tx[32];
    int kx = f->role == INITIATOR ? crypto_kx_client_session_keys(rx, tx, pk, sk, peer)
                                  : crypto_kx_server_session_keys(rx, tx, pk, sk, peer);
    if (kx != 0) { /* the real side refuses such a key; derive something all the same */
        memset(rx, 0, 32);
        memset(tx, 0, 32);
    }
    const uint8_t *i2r = f->role == INITIATOR ? tx : rx, *r2i = f->role == INITIATOR ? rx : tx;
    const char *labels[3] = {"hetring-key-i2r", "hetring-key-r2i", "hetring-confirm"};
    uint8_t *outs[3] = {f->i2r, f->r2i, conf};
    for (int i = 0; i < 3; i++) {
        crypto_generichash_init(&s, f->psk, f->psk ? 32 : 0, 32);
        crypto_generichash_update(&s, (const uint8_t *)labels[i], strlen(labels[i]));
        crypto_generichash_update(&s, th, 32);
        crypto_generichash_update(&s, i2r, 32);
        crypto_generichash_update(&s, r2i, 32);
        crypto_generichash_final(&s, outs[i], 32);
    }
}

static void fk_proof(const fake *f, const uint8_t th[32], const uint8_t conf[32],
                     uint8_t out[SEC_PROOF]) {
    const char *label =
        f->role == RESPONDER ? "hetring-proof-responder" : "hetring-proof-initiator";
    size_t ll = strlen(label);
    uint8_t m[64];
    memcpy(m, label, ll);
    memcpy(m + ll, th, 32);
    memset(out, 0, SEC_PROOF);
    if (f->sign_sk) crypto_sign_detached(out, NULL, m, ll + 32, f->sign_sk);
    crypto_generichash(out + 64, 32, (const uint8_t *)label, ll, conf, 32);
}

/* Does the real node's proof verify, as node 0 (signature, when identities are in use) and by
 * the confirmation key? */
static int fk_verify(const fake *f, const uint8_t th[32], const uint8_t conf[32],
                     const uint8_t in[SEC_PROOF]) {
    fake other = *f;
    other.role = !f->role;
    uint8_t want[SEC_PROOF];
    fk_proof(&other, th, conf, want);
    int ok = sodium_memcmp(want + 64, in + 64, 32) == 0;
    if (f->peer_pk) {
        const char *label =
            other.role == RESPONDER ? "hetring-proof-responder" : "hetring-proof-initiator";
        uint8_t m[64];
        memcpy(m, label, strlen(label));
        memcpy(m + strlen(label), th, 32);
        ok = ok && crypto_sign_verify_detached(in, m, strlen(label) + 32, f->peer_pk) == 0;
    }
    return ok;
}

/* Send this end's hello (as the script says); returns -1 when the script stops here. */
static int fk_send_hello(fake *f, uint8_t mine[HELLO], const uint8_t pk[32]) {
    if (f->script == FK_GARBAGE) {
        randombytes_buf(mine, HELLO);
        return fk_send(f->fd, mine, HELLO);
    }
    if (f->script == FK_HTTP) {
        (void)fk_send(f->fd, "GET / HTTP/1.0\r\n\r\n", 18);
        uint8_t sink[64];
        (void)fk_recv(f->fd, sink, sizeof sink);
        return -1;
    }
    if (f->script == FK_REPLAY)
        memcpy(mine, f->rec_hello, HELLO);
    else
        fk_hello(f, mine, pk);
    if (f->script == FK_CUT_HELLO || f->script == FK_STALL_HELLO) {
        (void)fk_send(f->fd, mine, 100);
        uint8_t sink[64];
        if (f->script == FK_STALL_HELLO) (void)fk_recv(f->fd, sink, sizeof sink);
        return -1;
    }
    if (f->record) memcpy(f->rec_hello, mine, HELLO);
    return fk_send(f->fd, mine, HELLO);
}

/* Send this end's proof message (as the script says); -1 when the script stops here. */
static int fk_send_proof(fake *f, const uint8_t th[32], const uint8_t conf[32]) {
    uint8_t m[SEC_MSG_HDR + SEC_PROOF] = {MSG_PROOF, 0};
    le_put32(m + 4, SEC_PROOF);
    fk_proof(f, th, conf, m + SEC_MSG_HDR);
    if (f->script == FK_REPLAY) memcpy(m, f->rec_proof, sizeof m);
    if (f->record) memcpy(f->rec_proof, m, sizeof m);
    switch (f->script) {
    case FK_VERDICT_NO_PROOF:
        return fk_msg(f->fd, MSG_VERDIC, 0, NULL, 0);
    case FK_CUT_PROOF:
        (void)fk_send(f->fd, m, SEC_MSG_HDR + 40);
        return -1;
    case FK_OVERSIZE:
        le_put32(m + 4, 5000);
        return fk_send(f->fd, m, sizeof m);
    case FK_RESERVED:
        m[2] = 1;
        return fk_send(f->fd, m, sizeof m);
    default:
        if (fk_send(f->fd, m, sizeof m) != 0) return -1;
        return f->script == FK_TWO_PROOFS ? fk_send(f->fd, m, sizeof m) : 0;
    }
}

static void fk_ephemeral(const fake *f, uint8_t pk[32], uint8_t sk[32]) {
    crypto_kx_keypair(pk, sk);
    if (f->script == FK_ZERO_EPH) memset(pk, 0, 32);
}

static void fk_responder(fake *f) {
    uint8_t theirs[HELLO], mine[HELLO], pk[32], sk[32], th[32], conf[32], body[SEC_TEXT_MAX];
    fk_ephemeral(f, pk, sk);
    if (fk_recv(f->fd, theirs, HELLO) != 0 || fk_send_hello(f, mine, pk) != 0) return;
    if (f->script == FK_REFUSE) {
        (void)fk_msg(f->fd, MSG_VERDIC, HR_ERR_AUTH, "go away", 7);
        return;
    }
    fk_keys(f, theirs, mine, pk, sk, theirs + 64, th, conf);
    if (fk_send_proof(f, th, conf) != 0) return;
    if (fk_read_msg(f, body) != MSG_PROOF) return;
    f->proof_ok = fk_verify(f, th, conf, body);
    (void)fk_msg(f->fd, MSG_VERDIC, 0, NULL, 0);
}

static void fk_initiator(fake *f) {
    uint8_t theirs[HELLO], mine[HELLO], pk[32], sk[32], th[32], conf[32], body[SEC_TEXT_MAX];
    fk_ephemeral(f, pk, sk);
    if (fk_send_hello(f, mine, pk) != 0 || fk_recv(f->fd, theirs, HELLO) != 0) return;
    if (fk_read_msg(f, body) != MSG_PROOF) return; /* refused: f->verdict says why */
    fk_keys(f, mine, theirs, pk, sk, theirs + 64, th, conf);
    f->proof_ok = fk_verify(f, th, conf, body);
    if (fk_send_proof(f, th, conf) != 0) return;
    (void)fk_read_msg(f, body);
}

static void *fk_main(void *arg) {
    fake *f = arg;
    if (f->role == RESPONDER)
        fk_responder(f);
    else
        fk_initiator(f);
    shutdown(f->fd, SHUT_RDWR);
    return NULL;
}

/* ================================================================ the cluster */

static char g_dir[] = "/tmp/hr-hs-XXXXXX";
static uint8_t g_seed[4][32]; /* identity seeds of nodes 0, 1, 2 and of an outsider (3) */
static uint8_t g_sk[4][64];   /* their Ed25519 secret keys */
static uint8_t g_pk[4][32];   /* and public keys */
static uint8_t g_psk[32], g_wrong_psk[32];

/* Write the cluster INI: nodes 0-2 on 127.0.0.1 (ports base..base+2), encrypt mode with
 * pinned identities, or auth mode with a PSK file. */
static void write_conf(const char *path, int psk_mode, int base, double ct) {
    FILE *f = fopen(path, "w");
    fprintf(f, "[cluster]\nname = hstest\nconnect_timeout = %g\ntimeout = 2\n", ct);
    if (psk_mode)
        fprintf(f, "security = auth\npsk_file = %s/psk\n", g_dir);
    else
        fprintf(f, "security = encrypt\nkey_file = %s/node{id}.key\n", g_dir);
    fprintf(f, "segment_bytes = %u\n[train]\niterations = 1\n", SEG);
    for (int i = 0; i < 3; i++) {
        uint8_t pk[32];
        char hex[65];
        sec_identity_public(g_seed[i], pk);
        cfg_hex_encode(pk, 32, hex);
        fprintf(f, "[node.%d]\nhost = 127.0.0.1\nport = %d\n", i, base + i);
        if (!psk_mode) fprintf(f, "pubkey = %s\n", hex);
    }
    fclose(f);
}

static void make_keys(void) {
    char path[128], err[HR_ERRLEN];
    for (int i = 0; i < 4; i++) {
        randombytes_buf(g_seed[i], 32);
        crypto_sign_seed_keypair(g_pk[i], g_sk[i], g_seed[i]);
        snprintf(path, sizeof path, "%s/node%d.key", g_dir, i);
        CHECK(sec_write_key_file(path, g_seed[i], "test", 1, err, sizeof err) == HR_OK, "%s", err);
    }
    randombytes_buf(g_psk, 32);
    randombytes_buf(g_wrong_psk, 32);
    snprintf(path, sizeof path, "%s/psk", g_dir);
    CHECK(sec_write_key_file(path, g_psk, "test", 1, err, sizeof err) == HR_OK, "%s", err);
}

/* The real node: node 0 of `c`, expecting node 1 at the other end. */
typedef struct {
    ring_config rc;  /* node 0's ring config, made from the INI as `hetring run` does */
    sec_keys keys;   /* its secrets */
    sec_hs_params p; /* what its handshake expects */
} realnode;

static void real_init(realnode *r, int psk_mode) {
    char path[128], err[HR_ERRLEN];
    snprintf(path, sizeof path, "%s/%s.ini", g_dir, psk_mode ? "auth" : "encrypt");
    write_conf(path, psk_mode, 20000, 5);
    cfg c;
    cfg_init(&c);
    CHECK(cfg_load(&c, path, err, sizeof err) == HR_OK, "config: %s", err);
    CHECK(app_ring_config(&c, cfg_node_index(&c, 0), &r->rc, err, sizeof err) == HR_OK,
          "ring config: %s", err);
    cfg_free(&c);
    CHECK(sec_keys_load(&r->keys, &r->rc, err, sizeof err) == HR_OK, "keys: %s", err);
    r->p = (sec_hs_params){
        .rc = &r->rc,
        .keys = &r->keys,
        .epoch = 0,
        .self_id = 0,
        .expect_id = 1,
        .seg_bytes = SEG,
        .tree_bytes = TREE};
}

static void real_free(realnode *r) {
    sec_keys_free(&r->keys);
    ring_config_wipe(&r->rc);
}

/* A fake that plays node 1 honestly toward node 0, in `r`'s mode. */
static fake honest(const realnode *r, int role) {
    fake f = {.role = role,
              .mode = r->keys.mode,
              .from = 1,
              .to = 0,
              .seg = SEG,
              .tree_bytes = TREE,
              .shift = -1,
              .name = "hstest",
              .sign_sk = r->keys.have_identity ? g_sk[1] : NULL,
              .psk = r->keys.have_psk ? g_psk : NULL,
              .peer_pk = r->keys.have_identity ? g_pk[0] : NULL,
              .verdict = -1};
    return f;
}

/* A channel on the heap: its AES-GCM state wants 16-byte alignment, and aligned_alloc wants a
 * size that is a multiple of the alignment. */
static sec_chan *chan_alloc(void) {
    sec_chan *ch = aligned_alloc(64, (sizeof *ch + 63) & ~(size_t)63);
    if (!ch) abort();
    return ch;
}

static int is_zero(const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return 0;
    return 1;
}

/* Run the real node's handshake (the opposite role of the fake) against `f`. `deadline_s` is
 * the real side's deadline from now. Returns its status; its message goes to `err`. */
static hr_status run(realnode *r, fake *f, double deadline_s, sec_chan *ch, int *refused, char *err,
                     size_t errlen) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return HR_ERR_IO;
    struct timeval tv = {5, 0}; /* the fake never blocks longer than this */
    setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(sv[1], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    f->fd = sv[1];
    pthread_t th;
    pthread_create(&th, NULL, fk_main, f);
    double t0 = tcp_now();
    hr_status st = sec_handshake(sv[0], f->role == RESPONDER, &r->p, t0 + deadline_s, ch, refused,
                                 err, errlen);
    double took = tcp_now() - t0;
    CHECK(took < deadline_s + 0.5, "the handshake took %.2f s with a %.2f s deadline", took,
          deadline_s);
    close(sv[0]); /* unblocks a fake still waiting */
    pthread_join(th, NULL);
    close(sv[1]);
    return st;
}

/* One cheat: the real side must fail with `want` and a message containing `text`, and leave
 * the channel wiped. */
static void expect_fail(realnode *r, fake *f, hr_status want, const char *text, const char *what) {
    sec_chan *ch = chan_alloc();
    memset(ch, 0xA5, sizeof *ch);
    char err[HR_ERRLEN] = "";
    int refused = -1;
    hr_status st = run(r, f, f->script == FK_STALL_HELLO ? 0.5 : 3, ch, &refused, err, sizeof err);
    printf("%-44s -> %s: %s\n", what, hr_strerror(st), err);
    CHECK(st == want, "%s: status %s, expected %s (%s)", what, hr_strerror(st), hr_strerror(want),
          err);
    CHECK(strstr(err, text) != NULL, "%s: message '%s' lacks '%s'", what, err, text);
    CHECK(is_zero(ch, sizeof *ch), "%s: the channel was not wiped", what);
    CHECK(refused == (strstr(text, "refused this node") != NULL), "%s: refused = %d", what,
          refused);
    free(ch);
}

/* ================================================================ part 1: sec_handshake */

/* The honest fake succeeds and both ends hold the same frame keys. */
static void test_honest(realnode *r, int role, const char *what) {
    fake f = honest(r, role);
    sec_chan *ch = chan_alloc();
    char err[HR_ERRLEN] = "";
    int refused;
    hr_status st = run(r, &f, 3, ch, &refused, err, sizeof err);
    CHECK(st == HR_OK, "%s: honest fake refused: %s", what, err);
    CHECK(f.proof_ok == 1, "%s: the real node's proof did not verify at the fake", what);
    if (role == INITIATOR)
        CHECK(f.verdict == 0, "%s: the fake got verdict %d (%s)", what, f.verdict, f.text);
    /* the fake advertises no AES, so the channel is XChaCha20-Poly1305; window 0's keys are
     * derived from the handshake's with the window number (crypto_kdf, context "hrwindow") */
    const uint8_t *tx = role == RESPONDER ? f.i2r : f.r2i, *rx = role == RESPONDER ? f.r2i : f.i2r;
    uint8_t tx0[32], rx0[32];
    crypto_kdf_derive_from_key(tx0, 32, 0, "hrwindow", tx);
    crypto_kdf_derive_from_key(rx0, 32, 0, "hrwindow", rx);
    CHECK(st == HR_OK && ch->tx.aead == SEC_AEAD_XCHACHA20 && memcmp(ch->tx.base, tx, 32) == 0 &&
              memcmp(ch->rx.base, rx, 32) == 0 && memcmp(ch->tx.key, tx0, 32) == 0 &&
              memcmp(ch->rx.key, rx0, 32) == 0,
          "%s: the two ends derived different frame keys", what);
    CHECK(st == HR_OK && ch->tx.shift == sec_window_shift(SEG) && ch->rx.shift == ch->tx.shift,
          "%s: key windows of 2^%u frames, expected 2^%u", what, ch->tx.shift,
          sec_window_shift(SEG));
    printf("%-44s -> ok\n", what);
    sec_chan_free(ch);
    free(ch);
}

/* Cheats both roles can try. */
static void test_cheats(realnode *r, int role, const char *tag) {
    char what[96];
    fake f;
    int psk_only = !r->keys.have_identity;
#define CASE(name, setup, want, text)                                                              \
    do {                                                                                           \
        f = honest(r, role);                                                                       \
        setup;                                                                                     \
        snprintf(what, sizeof what, "%s: %s", tag, name);                                          \
        expect_fail(r, &f, want, text, what);                                                      \
    } while (0)
    CASE("no proof", f.script = FK_VERDICT_NO_PROOF, HR_ERR_AUTH, "sent no proof");
    if (psk_only) {
        CASE("wrong PSK", f.psk = g_wrong_psk, HR_ERR_AUTH, "a different pre-shared key");
        CASE("no PSK", f.psk = NULL, HR_ERR_AUTH, "key confirmation does not match");
    } else {
        CASE("another node's key", f.sign_sk = g_sk[2], HR_ERR_AUTH,
             "does not match the pubkey pinned for node 1");
        CASE("an outsider's key", f.sign_sk = g_sk[3], HR_ERR_AUTH,
             "does not match the pubkey pinned for node 1");
        CASE("no identity", f.sign_sk = NULL, HR_ERR_AUTH, "signature does not match");
    }
    CASE("node not in the INI", (f.from = 7, f.sign_sk = g_sk[3]), HR_ERR_AUTH,
         "unknown peer: node id 7");
    CASE("another node's id", f.from = 2, HR_ERR_VIEW, "node 2 is not the expected neighbour");
    CASE("wrong cluster name", f.name = "other", HR_ERR_PROTO, "cluster name 'other' differs");
    CASE("mismatched mode", f.mode = psk_only ? RING_SEC_ENCRYPT : RING_SEC_AUTH, HR_ERR_PROTO,
         "differs from this node's");
    CASE("mismatched segment size", f.seg = SEG / 2, HR_ERR_PROTO, "segment_bytes 32768 differs");
    /* a node of the protocol before key windows (2) is told apart, not met with frames that
     * fail to open */
    CASE("an older protocol version", f.version = 2, HR_ERR_PROTO,
         "protocol version 2, this node speaks 3");
    CASE("mismatched key window", f.shift = 3, HR_ERR_PROTO,
         "key windows of 2^3 frames differ from this node's 2^19");
    CASE("mismatched tree_bytes", f.tree_bytes = TREE / 2, HR_ERR_PROTO,
         "tree_bytes 2048 differs");
    CASE("unknown link kind", f.link = 5, HR_ERR_PROTO, "unknown link kind 5");
    if (role == INITIATOR)
        CASE("a tree link where none is expected", f.link = SEC_LINK_TREE, HR_ERR_VIEW,
             "has no tree parent");
    else
        CASE("a tree answer to a ring link", f.link = SEC_LINK_TREE, HR_ERR_PROTO,
             "answered a ring link as a tree link");
    CASE("another view epoch", f.epoch = 3, HR_ERR_VIEW, "view epoch 3 differs");
    CASE("addressed to another node", f.to = 2, HR_ERR_PROTO, "it wanted node 2");
    CASE("wrong role", f.wrong_role = 1, HR_ERR_PROTO, "unexpected handshake role");
    CASE("not a hetring hello", f.script = FK_GARBAGE, HR_ERR_PROTO, "not a hetring peer");
    /* told at once, not as a timeout: a 3 s deadline would fail the status */
    CASE("an HTTP request, then silence", f.script = FK_HTTP, HR_ERR_PROTO,
         "not a hetring peer (bad handshake magic: it began with \"GET \")");
    CASE("invalid ephemeral key", f.script = FK_ZERO_EPH, HR_ERR_AUTH, "invalid ephemeral key");
    CASE("truncated hello", f.script = FK_CUT_HELLO, HR_ERR_PEER, "connection lost");
    CASE("stalled hello", f.script = FK_STALL_HELLO, HR_ERR_TIMEOUT, "timed out");
    CASE("truncated proof", f.script = FK_CUT_PROOF, HR_ERR_PEER, "connection lost");
    CASE("oversized message", f.script = FK_OVERSIZE, HR_ERR_PROTO, "5000 bytes");
    CASE("reserved bytes set", f.script = FK_RESERVED, HR_ERR_PROTO, "malformed handshake");
    if (role == RESPONDER) {
        CASE("two proofs", f.script = FK_TWO_PROOFS, HR_ERR_PROTO, "out of order");
        CASE("refusal", f.script = FK_REFUSE, HR_ERR_AUTH, "it refused this node: go away");
    }
#undef CASE
}

/* A transcript recorded from an honest session, replayed into a fresh one, must not verify:
 * the real side's new ephemeral key changes the transcript hash. */
static void test_replay(realnode *r, int role, const char *tag) {
    fake f = honest(r, role);
    f.record = 1;
    sec_chan *ch = chan_alloc();
    char err[HR_ERRLEN], what[96];
    int refused;
    CHECK(run(r, &f, 3, ch, &refused, err, sizeof err) == HR_OK, "recording session: %s", err);
    sec_chan_free(ch);
    free(ch);
    f.record = 0;
    f.script = FK_REPLAY;
    f.verdict = -1;
    snprintf(what, sizeof what, "%s: replayed transcript", tag);
    expect_fail(r, &f, HR_ERR_AUTH, "authentication failed", what);
    if (role == INITIATOR)
        CHECK(f.verdict == HR_ERR_AUTH, "%s: the replaying fake was not told (verdict %d)", what,
              f.verdict);
}

/* A refused fake initiator is told why: the real responder's verdict carries the reason. */
static void test_refusal_is_told(realnode *r) {
    fake f = honest(r, INITIATOR);
    f.sign_sk = g_sk[2];
    sec_chan *ch = chan_alloc();
    char err[HR_ERRLEN];
    int refused;
    (void)run(r, &f, 3, ch, &refused, err, sizeof err);
    CHECK(f.verdict == HR_ERR_AUTH && strstr(f.text, "signature does not match"),
          "the refused initiator got verdict %d '%s'", f.verdict, f.text);
    /* and a refused responder, too: the real initiator answers a bad proof with a verdict */
    f = honest(r, RESPONDER);
    f.sign_sk = g_sk[2];
    (void)run(r, &f, 3, ch, &refused, err, sizeof err);
    CHECK(f.verdict == HR_ERR_AUTH && strstr(f.text, "signature does not match"),
          "the refused responder got verdict %d '%s'", f.verdict, f.text);
    free(ch);
}

/* Lobby hellos (epoch SEC_EPOCH_LOBBY) at a responder that takes lobby calls and expects no
 * ring link (as the gate while no view forms): any member but itself is accepted and named,
 * with its proof checked as for a ring link; strangers, wrong keys and ring links are refused.
 * A responder that takes no lobby calls refuses them; a real lobby initiator succeeds. */
static void test_lobby(realnode *r, const char *mode) {
    char what[96], err[HR_ERRLEN];
    int psk_only = !r->keys.have_identity, refused;
    sec_hs_params ring_p = r->p;
    sec_hs_peer who = {-1, -1, -1};
    r->p.accept_lobby = 1;
    r->p.expect_id = -1;
    r->p.peer = &who;
    for (long id = 1; id <= 2; id++) {
        fake f = honest(r, INITIATOR);
        f.epoch = SEC_EPOCH_LOBBY;
        f.from = id;
        if (!psk_only) f.sign_sk = g_sk[id];
        sec_chan *ch = chan_alloc();
        who = (sec_hs_peer){-1, -1, -1};
        hr_status st = run(r, &f, 3, ch, &refused, err, sizeof err);
        snprintf(what, sizeof what, "%s: lobby hello from node %ld", mode, id);
        printf("%-44s -> %s, caller %ld, lobby %d\n", what, hr_strerror(st), who.id, who.lobby);
        CHECK(st == HR_OK, "%s refused: %s", what, err);
        CHECK(who.id == id && who.lobby == 1, "%s: reported caller %ld, lobby %d", what, who.id,
              who.lobby);
        CHECK(f.proof_ok == 1 && f.verdict == 0, "%s: the caller did not accept node 0", what);
        sec_chan_free(ch);
        free(ch);
    }
    fake f;
#define LOBBY_CASE(name, setup, want, text)                                                        \
    do {                                                                                           \
        f = honest(r, INITIATOR);                                                                  \
        f.epoch = SEC_EPOCH_LOBBY;                                                                 \
        setup;                                                                                     \
        snprintf(what, sizeof what, "%s: lobby: %s", mode, name);                                  \
        who = (sec_hs_peer){-1, -1, -1};                                                           \
        expect_fail(r, &f, want, text, what);                                                      \
        CHECK(who.id == -1, "%s: a caller was reported", what);                                    \
    } while (0)
    LOBBY_CASE("a stranger", (f.from = 7, f.sign_sk = g_sk[3]), HR_ERR_AUTH,
               "unknown peer: node id 7");
    if (psk_only)
        LOBBY_CASE("wrong PSK", f.psk = g_wrong_psk, HR_ERR_AUTH, "a different pre-shared key");
    else
        LOBBY_CASE("an outsider's key", f.sign_sk = g_sk[3], HR_ERR_AUTH,
                   "does not match the pubkey pinned for node 1");
    LOBBY_CASE("no proof", f.script = FK_VERDICT_NO_PROOF, HR_ERR_AUTH, "sent no proof");
    LOBBY_CASE("this node's own id", (f.from = 0, f.sign_sk = g_sk[0]), HR_ERR_PROTO,
               "this node's own id");
    LOBBY_CASE("another cluster", f.name = "other", HR_ERR_PROTO, "cluster name 'other' differs");
    LOBBY_CASE("a ring link while none forms", f.epoch = 0, HR_ERR_VIEW, "no view is forming");
    r->p = ring_p; /* a responder that takes no lobby calls (a ring link forming) */
    LOBBY_CASE("not taken here", (void)0, HR_ERR_VIEW, "view epoch 18446744073709551615 differs");
#undef LOBBY_CASE
    /* the calling end: a real lobby initiator and an honest member answering */
    r->p.epoch = SEC_EPOCH_LOBBY;
    r->p.peer = &who;
    f = honest(r, RESPONDER);
    f.epoch = SEC_EPOCH_LOBBY;
    sec_chan *ch = chan_alloc();
    hr_status st = run(r, &f, 3, ch, &refused, err, sizeof err);
    snprintf(what, sizeof what, "%s: lobby call to node 1", mode);
    printf("%-44s -> %s\n", what, hr_strerror(st));
    CHECK(st == HR_OK && who.id == 1 && who.lobby == 1, "%s: %s (peer %ld)", what, err, who.id);
    sec_chan_free(ch);
    free(ch);
    r->p = ring_p;
}

/* Tree links (SEC_LINK_TREE): a responder whose view gives it tree parent node 2 takes a tree
 * link from node 2 alone and names it as one, still takes its ring predecessor (node 1) on a
 * ring link, and refuses either node on the other's link; an initiator asking for a tree link
 * refuses an answer of a ring link. */
static void test_tree(realnode *r, const char *mode) {
    char what[96], err[HR_ERRLEN];
    int psk_only = !r->keys.have_identity, refused;
    sec_hs_params ring_p = r->p;
    sec_hs_peer who = {-1, -1, -1};
    r->p.tree = 1;
    r->p.expect_tree_id = 2;
    r->p.peer = &who;
    static const struct {
        long from;
        int link;
    } ok[2] = {{2, SEC_LINK_TREE}, {1, SEC_LINK_RING}};
    for (int i = 0; i < 2; i++) {
        fake f = honest(r, INITIATOR);
        f.from = ok[i].from;
        f.link = ok[i].link;
        if (!psk_only) f.sign_sk = g_sk[f.from];
        sec_chan *ch = chan_alloc();
        who = (sec_hs_peer){-1, -1, -1};
        hr_status st = run(r, &f, 3, ch, &refused, err, sizeof err);
        snprintf(what, sizeof what, "%s: %s link from node %ld", mode, f.link ? "tree" : "ring",
                 f.from);
        printf("%-44s -> %s, peer %ld, tree %d\n", what, hr_strerror(st), who.id, who.tree);
        CHECK(st == HR_OK, "%s refused: %s", what, err);
        CHECK(who.id == f.from && who.tree == f.link && who.lobby == 0,
              "%s: reported peer %ld, tree %d, lobby %d", what, who.id, who.tree, who.lobby);
        CHECK(f.proof_ok == 1 && f.verdict == 0, "%s: the caller did not accept node 0", what);
        sec_chan_free(ch);
        free(ch);
    }
    fake f = honest(r, INITIATOR);
    f.link = SEC_LINK_TREE; /* node 1 is the predecessor, not the tree parent */
    snprintf(what, sizeof what, "%s: tree link from the predecessor", mode);
    expect_fail(r, &f, HR_ERR_VIEW, "not the expected tree neighbour (node 2)", what);
    f = honest(r, INITIATOR);
    f.from = 2; /* the tree parent on a ring link */
    if (!psk_only) f.sign_sk = g_sk[2];
    snprintf(what, sizeof what, "%s: ring link from the tree parent", mode);
    expect_fail(r, &f, HR_ERR_VIEW, "node 2 is not the expected neighbour (node 1)", what);
    /* the parent's end: a real tree initiator to node 1, answered with a ring hello */
    r->p = ring_p;
    r->p.link = SEC_LINK_TREE;
    f = honest(r, RESPONDER);
    snprintf(what, sizeof what, "%s: tree link answered as a ring link", mode);
    expect_fail(r, &f, HR_ERR_PROTO, "answered a tree link as a ring link", what);
    f = honest(r, RESPONDER);
    f.link = SEC_LINK_TREE;
    sec_chan *ch = chan_alloc();
    hr_status st = run(r, &f, 3, ch, &refused, err, sizeof err);
    snprintf(what, sizeof what, "%s: tree link to node 1", mode);
    printf("%-44s -> %s\n", what, hr_strerror(st));
    CHECK(st == HR_OK, "%s: %s", what, err);
    sec_chan_free(ch);
    free(ch);
    r->p = ring_p;
}

static void part1(int psk_mode) {
    realnode r;
    real_init(&r, psk_mode);
    const char *mode = psk_mode ? "auth/psk" : "encrypt/identity";
    char tag[64];
    for (int role = INITIATOR; role <= RESPONDER; role++) {
        snprintf(tag, sizeof tag, "%s, fake %s", mode,
                 role == INITIATOR ? "initiator" : "responder");
        test_honest(&r, role, tag);
        test_cheats(&r, role, tag);
        test_replay(&r, role, tag);
    }
    if (!psk_mode) test_refusal_is_told(&r);
    test_lobby(&r, mode);
    test_tree(&r, mode);
    real_free(&r);
}

/* ================================================================ part 2: ring_init, addresses */

typedef struct {
    fake f;     /* how it plays node 1 */
    int lfd;    /* node 1's listening socket (-1: none) */
    int port0;  /* node 0's port: the fake connects there when it plays the initiator */
    int accept; /* accept one connection on lfd and respond */
} fake_node;

static void *fake_node_main(void *arg) {
    fake_node *n = arg;
    if (n->accept) {
        struct timeval tv = {5, 0};
        setsockopt(n->lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        n->f.fd = accept(n->lfd, NULL, NULL);
    } else {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)n->port0)};
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        n->f.fd = socket(AF_INET, SOCK_STREAM, 0);
        for (int i = 0; i < 100; i++) { /* node 0 may not listen yet: 5 s at most */
            if (connect(n->f.fd, (struct sockaddr *)&a, sizeof a) == 0) break;
            usleep(50000);
        }
    }
    if (n->f.fd < 0) return NULL;
    struct timeval tv = {5, 0};
    setsockopt(n->f.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(n->f.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    fk_main(&n->f);
    close(n->f.fd);
    return NULL;
}

static int listen_on(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Node 0 of a 2-node ring against a fake node 1 that runs `script` in `role`. */
static void ring_case(int role, fk_script script, const char *text, const char *what) {
    static int base;
    if (!base) base = port_block(); /* tests/ports.h: claimed once, every case reuses it */
    char path[128], err[HR_ERRLEN] = "";
    snprintf(path, sizeof path, "%s/ring.ini", g_dir);
    write_conf(path, 0, base, 1.5);
    /* the 2-node ring is nodes 0 and 1: drop node 2 */
    FILE *fp = fopen(path, "r+");
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = 0;
    char *n2 = strstr(buf, "[node.2]");
    if (n2) *n2 = 0;
    fclose(fp);
    fp = fopen(path, "w");
    fputs(buf, fp);
    fclose(fp);

    cfg c;
    cfg_init(&c);
    CHECK(cfg_load(&c, path, err, sizeof err) == HR_OK, "config: %s", err);
    fake_node fn = {.lfd = listen_on(base + 1), .port0 = base, .accept = role == RESPONDER};
    CHECK(fn.lfd >= 0, "%s: cannot listen on port %d", what, base + 1);
    fn.f = (fake){.role = role,
                  .script = script,
                  .mode = RING_SEC_ENCRYPT,
                  .from = 1,
                  .to = 0,
                  .seg = SEG,
                  .tree_bytes = 65536, /* the ring's default */
                  .shift = -1,
                  .name = "hstest",
                  .sign_sk = g_sk[1],
                  .verdict = -1};
    /* as initiator the fake cheats toward node 0's port, and an honest responder thread lets
     * node 0's own connection to node 1 succeed, so only the cheat can stop the ring */
    fake_node hn = {.lfd = fn.lfd, .accept = 1, .f = fn.f};
    hn.f.role = RESPONDER;
    hn.f.script = FK_HONEST;
    pthread_t th, th2;
    pthread_create(&th, NULL, fake_node_main, &fn);
    if (role == INITIATOR) pthread_create(&th2, NULL, fake_node_main, &hn);
    ring_config rc;
    CHECK(app_ring_config(&c, cfg_node_index(&c, 0), &rc, err, sizeof err) == HR_OK,
          "ring config: %s", err);
    ring *r;
    hr_status st = ring_init(&r, &rc, err, sizeof err);
    ring_config_wipe(&rc);
    printf("%-44s -> %s: %s\n", what, hr_strerror(st), err);
    char addr[64];
    snprintf(addr, sizeof addr, role == RESPONDER ? "127.0.0.1:%d" : "from 127.0.0.1:", base + 1);
    CHECK(st != HR_OK, "%s: the ring formed", what);
    CHECK(strstr(err, addr) != NULL, "%s: '%s' does not name the address '%s'", what, err, addr);
    CHECK(strstr(err, text) != NULL, "%s: '%s' lacks '%s'", what, err, text);
    ring_free(r);
    pthread_join(th, NULL);
    if (role == INITIATOR) pthread_join(th2, NULL);
    close(fn.lfd);
    cfg_free(&c);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* keep the case lines in order with the failures */
    if (sodium_init() < 0 || !mkdtemp(g_dir)) {
        fprintf(stderr, "cannot start: libsodium or a temporary directory\n");
        return 1;
    }
    make_keys();
    part1(0);
    part1(1);
    ring_case(RESPONDER, FK_VERDICT_NO_PROOF, "sent no proof", "ring: successor skips its proof");
    ring_case(INITIATOR, FK_VERDICT_NO_PROOF, "sent no proof", "ring: predecessor skips its proof");
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return check_exit();
}
