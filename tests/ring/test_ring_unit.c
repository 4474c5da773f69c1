/*
 * test_ring_unit.c: frame headers, frame sealing (both AEADs, auth and encrypt), tamper and
 * replay detection, key files, poll's timeout for a deadline, the host part of an address
 * (the gate's eviction counts pending connections per host), the bf16 wire's rounding, and the
 * schedule's arithmetic at buffers above 2^32 bytes.
 *
 * Usage: test_ring_unit            frames, XChaCha20-Poly1305 sealing, key files
 *        test_ring_unit aes256gcm  AES-256-GCM sealing only; exits 77 (ctest's skip) on a CPU
 *                                  without AES-NI, so a skip is never reported as a pass
 */
#include "base/hr_addr.h"
#include "ring/elect_internal.h"  /* elect_check_own */
#include "ring/engine_internal.h" /* eng_bf16: the bf16 wire's rounding */
#include "ring/frame.h"
#include "ring/sec.h"
#include "ring/tcp.h"
#include "tests/check.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_frame(void) {
    frame_hdr h = {FRAME_MAGIC,
                   FRAME_VERSION,
                   FRAME_DATA,
                   FRAME_COLL_ALLREDUCE,
                   0x0102030405060708ull,
                   42,
                   7,
                   1234},
              g;
    uint8_t b[FRAME_HDR];
    frame_encode(&h, b);
    frame_decode(b, &g);
    CHECK(memcmp(&h, &g, sizeof h) == 0, "frame header round trip");
    CHECK(b[0] == 'H' && b[1] == 'R' && b[2] == 'N' && b[3] == 'G', "magic on the wire");
}

static void pair(sec_dir *tx, sec_dir *rx, int mode, int aead) {
    uint8_t key[32];
    randombytes_buf(key, sizeof key);
    sec_dir_init(tx, mode, aead, key, sec_window_shift(1 << 20));
    sec_dir_init(rx, mode, aead, key, sec_window_shift(1 << 20));
}

static void test_seal(int mode, int aead) {
    sec_dir *tx = aligned_alloc(16, sizeof *tx), *rx = aligned_alloc(16, sizeof *rx);
    memset(rx, 0, sizeof *rx);
    pair(tx, rx, mode, aead);
    size_t len = 1000;
    uint8_t *f = malloc(FRAME_HDR + len + SEC_TAG), *f2 = malloc(FRAME_HDR + len + SEC_TAG);
    uint8_t src[1000], out[1000];
    for (size_t i = 0; i < len; i++) src[i] = (uint8_t)i;
    frame_hdr h = {FRAME_MAGIC, FRAME_VERSION, FRAME_DATA, 1, 0, 0, 0, (uint32_t)len};
    const char *what = mode == RING_SEC_AUTH ? "auth" : "encrypt";
    for (int round = 0; round < 3; round++) {
        h.index = (uint32_t)round;
        frame_encode(&h, f);
        sec_seal(tx, f, src, len);
        memcpy(f2, f, FRAME_HDR + len + SEC_TAG);
        if (mode == RING_SEC_ENCRYPT)
            CHECK(memcmp(f + FRAME_HDR, src, len) != 0, "%s: payload is not plaintext", what);
        else
            CHECK(memcmp(f + FRAME_HDR, src, len) == 0, "%s: payload is plaintext", what);
        CHECK(sec_open(rx, f, len, out) == 0, "%s/%s: authentic frame opens", what,
              sec_aead_name(aead));
        CHECK(memcmp(out, src, len) == 0, "%s: payload round trip", what);
    }
    /* tampering: a payload bit, a header bit, the tag; each wipes the output */
    int spots[3] = {FRAME_HDR + 500, 20, FRAME_HDR + (int)len + 3};
    for (int s = 0; s < 3; s++) {
        sec_dir *t2 = aligned_alloc(16, sizeof *t2), *r2 = aligned_alloc(16, sizeof *r2);
        pair(t2, r2, mode, aead);
        frame_encode(&h, f);
        sec_seal(t2, f, src, len);
        f[spots[s]] ^= 1;
        memset(out, 0x55, len);
        CHECK(sec_open(r2, f, len, out) != 0, "%s: tampered byte %d detected", what, spots[s]);
        int wiped = 1;
        for (size_t i = 0; i < len; i++) wiped &= out[i] == 0;
        CHECK(wiped, "%s: output wiped after a failed open", what);
        free(t2);
        free(r2);
    }
    /* replay: the last good frame again is refused (the counter moved on) */
    CHECK(sec_open(rx, f2, len, out) != 0, "%s: replayed frame detected", what);
    free(f);
    free(f2);
    free(tx);
    free(rx);
}

/* Seal frame `ctr` of `tx` (sec_seal_at) and open it with `rx`: 0 when it opens whole. */
static int seal_open_at(const sec_dir *tx, const sec_dir *rx, uint64_t ctr) {
    uint8_t f[FRAME_HDR + 64 + SEC_TAG], src[64], out[64];
    frame_hdr h = {FRAME_MAGIC, FRAME_VERSION, FRAME_DATA, 1, 0, 0, (uint32_t)ctr, sizeof src};
    for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)(ctr + i);
    frame_encode(&h, f);
    sec_seal_at(tx, ctr, f, src, sizeof src);
    if (sec_open_at(rx, ctr, f, sizeof src, out) != 0) return -1;
    return memcmp(out, src, sizeof src) == 0 ? 0 : -1;
}

/* Key windows: frame keys change every 2^shift frames, alike at both ends and on either path
 * (the in-order calls that keep a window's state, the _at calls that make one for a frame of
 * another window), up to the counter's far end; a frame of one window opens under no other
 * window's key. */
static void test_windows(int mode, int aead) {
    const char *what = sec_aead_name(aead);
    /* the shift: the largest that keeps 2^shift stage-sized frames within 2^SEC_WINDOW_LOG2 */
    uint32_t segs[] = {64, 1000, 1 << 16, 1 << 20, 3u << 20, 1u << 30, UINT32_MAX};
    for (size_t i = 0; i < sizeof segs / sizeof *segs; i++) {
        unsigned sh = sec_window_shift(segs[i]);
        uint64_t frame = FRAME_HDR + (uint64_t)segs[i] + 64 + SEC_TAG, cap = 1ull << 36;
        CHECK(sh < 30 && frame << sh <= cap && frame << (sh + 1) > cap,
              "segment %u: 2^%u frames of %llu bytes per key window", segs[i], sh,
              (unsigned long long)frame);
    }
    CHECK(sec_window_shift(1u << 30) == 5, "1 GiB segments: windows of 32 frames (%u)",
          sec_window_shift(1u << 30));
    sec_dir *tx = aligned_alloc(16, sizeof *tx), *rx = aligned_alloc(16, sizeof *rx);
    sec_dir *other = aligned_alloc(16, sizeof *other);
    uint8_t key[32];
    randombytes_buf(key, sizeof key);
    /* in order, across five windows of 4 frames: each end changes keys at the same frame */
    sec_dir_init(tx, mode, aead, key, 2);
    sec_dir_init(rx, mode, aead, key, 2);
    uint8_t f[FRAME_HDR + 100 + SEC_TAG], src[100], out[100];
    memset(src, 7, sizeof src);
    frame_hdr h = {FRAME_MAGIC, FRAME_VERSION, FRAME_DATA, 1, 0, 0, 0, sizeof src};
    int ok = 1;
    for (uint32_t i = 0; i < 20; i++) {
        h.index = i;
        frame_encode(&h, f);
        sec_seal(tx, f, src, sizeof src);
        ok &= sec_open(rx, f, sizeof src, out) == 0 && memcmp(out, src, sizeof src) == 0;
    }
    CHECK(ok && tx->win == 4 && rx->win == 4, "%s: 20 frames in order over 5 windows (at %llu)",
          what, (unsigned long long)tx->win);
    /* out of order on const channels, in windows other than the one kept: frame 2 of window 0
     * and frames of windows 1, 7 and far away, each sealed and opened with a state of its own */
    uint64_t ctrs[] = {2, 5, 31, 1ull << 40, (1ull << 40) + 3};
    ok = 1;
    for (size_t i = 0; i < sizeof ctrs / sizeof *ctrs; i++)
        ok &= seal_open_at(tx, rx, ctrs[i]) == 0;
    CHECK(ok, "%s: frames of other windows seal and open on const channels", what);
    /* the _at calls and the in-order ones agree: frames sealed on a channel kept at window 0
     * open in order on one that changes windows, and the other way round */
    sec_dir_init(other, mode, aead, key, 2);
    tx->ctr = rx->ctr = 0;
    ok = 1;
    for (uint32_t i = 0; i < 20; i++) {
        h.index = i;
        frame_encode(&h, f);
        sec_seal_at(other, i, f, src, sizeof src);
        ok &= sec_open(rx, f, sizeof src, out) == 0;
        frame_encode(&h, f);
        sec_seal(tx, f, src, sizeof src);
        ok &= sec_open_at(other, i, f, sizeof src, out) == 0;
    }
    CHECK(ok && other->win == 0 && rx->win == 4,
          "%s: frames of 5 windows sealed with _at open in order, and the other way round", what);
    /* a frame sealed in window j does not open under window j + 1's key (same nonce): `other`
     * has the same key and windows of 2 frames, so frame 4 is in its window 2, tx's window 1 */
    sec_dir_init(other, mode, aead, key, 1);
    CHECK(seal_open_at(tx, other, 4) != 0 && seal_open_at(other, tx, 4) != 0,
          "%s: frame 4 sealed in window 1 does not open in window 2", what);
    sec_dir_init(other, mode, aead, key, 0); /* a window per frame: frame 1 is window 1 */
    CHECK(seal_open_at(tx, other, 1) != 0 && seal_open_at(other, tx, 1) != 0,
          "%s: frame 1 sealed in window 0 does not open in window 1", what);
    CHECK(seal_open_at(other, other, 1) == 0 && seal_open_at(other, other, 2) == 0,
          "%s: windows of one frame seal and open", what);
    /* a key of the handshake's other direction opens nothing */
    uint8_t key2[32];
    memcpy(key2, key, 32);
    key2[31] ^= 1;
    sec_dir_init(other, mode, aead, key2, 2);
    CHECK(seal_open_at(tx, other, 0) != 0, "%s: another direction key opens nothing", what);
    /* the counter's far end: the last window (2^62 - 1 with windows of 4 frames) and the one
     * before it, in order and at any counter; no window arithmetic wraps */
    tx->ctr = rx->ctr = UINT64_MAX - 5;
    ok = 1;
    for (int i = 0; i < 5; i++) {
        h.index = (uint32_t)i;
        frame_encode(&h, f);
        sec_seal(tx, f, src, sizeof src);
        ok &= sec_open(rx, f, sizeof src, out) == 0;
    }
    CHECK(ok && tx->ctr == UINT64_MAX && tx->win == UINT64_MAX >> 2 && rx->win == UINT64_MAX >> 2,
          "%s: frames up to counter 2^64 - 2 in order, last window %llu", what,
          (unsigned long long)tx->win);
    CHECK(seal_open_at(tx, rx, UINT64_MAX) == 0 && seal_open_at(tx, rx, UINT64_MAX - 4) == 0 &&
              seal_open_at(tx, rx, 0) == 0,
          "%s: frames at counters 2^64 - 1, 2^64 - 5 and 0 from the far end", what);
    sec_dir_init(other, mode, aead, key, 63); /* one window of 2^63 frames, then a second */
    CHECK(seal_open_at(other, other, UINT64_MAX) == 0 && seal_open_at(other, tx, 1ull << 63) != 0 &&
              seal_open_at(other, other, (1ull << 63) - 1) == 0,
          "%s: windows of 2^63 frames", what);
    sodium_memzero(key, sizeof key);
    free(tx);
    free(rx);
    free(other);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "test_ring_unit: reading a FIFO as key file hung for 10 s\n";
    if (write(2, m, sizeof m - 1) < 0) _exit(1);
    _exit(1);
}

static void test_key_files(void) {
    char dir[] = "/tmp/hr_ring_unitXXXXXX", path[64], err[HR_ERRLEN];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/k", dir);
    uint8_t key[32], back[32];
    randombytes_buf(key, sizeof key);
    CHECK(sec_write_key_file(path, key, "test", 0, err, sizeof err) == HR_OK, "write: %s", err);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "key file mode 0600");
    CHECK(sec_write_key_file(path, key, "test", 0, err, sizeof err) != HR_OK,
          "an existing key file is not replaced");
    CHECK(sec_read_key_file(path, back, err, sizeof err) == HR_OK && memcmp(key, back, 32) == 0,
          "key file round trip: %s", err);
    chmod(path, 0640);
    CHECK(sec_read_key_file(path, back, err, sizeof err) == HR_ERR_CONFIG &&
              strstr(err, "readable by group or others"),
          "group-readable key file refused: %s", err);
    CHECK(strstr(err, "chmod 600") != NULL, "the message says how to fix it");
    unlink(path);
    /* a FIFO or a directory is refused at once, never waited on (SIGALRM ends a hang) */
    CHECK(mkfifo(path, 0600) == 0, "mkfifo %s", path);
    signal(SIGALRM, on_alarm);
    alarm(10);
    CHECK(sec_read_key_file(path, back, err, sizeof err) == HR_ERR_CONFIG && strstr(err, path) &&
              strstr(err, "not a regular file"),
          "a FIFO as key file refused: %s", err);
    unlink(path);
    CHECK(mkdir(path, 0700) == 0, "mkdir %s", path);
    CHECK(sec_read_key_file(path, back, err, sizeof err) == HR_ERR_CONFIG &&
              strstr(err, "not a regular file"),
          "a directory as key file refused: %s", err);
    alarm(0);
    rmdir(path);
    rmdir(dir);
}

/* A deadline far away (a step deadline of step_timeout = 1e6 times a slow step) is an hour of
 * poll, not an overflow to a negative timeout, which poll takes as "wait for ever"; one that
 * has passed is 0; one near is its milliseconds, rounded up. */
static void test_poll_ms(void) {
    double now = tcp_now();
    CHECK(tcp_poll_ms(now + 1e7) == 3600 * 1000, "a deadline 1e7 s away: %d ms",
          tcp_poll_ms(now + 1e7));
    CHECK(tcp_poll_ms(now + 3e9) == 3600 * 1000, "a deadline 3e9 s away: %d ms",
          tcp_poll_ms(now + 3e9));
    CHECK(tcp_poll_ms(now - 1) == 0, "a past deadline: %d ms", tcp_poll_ms(now - 1));
    int ms = tcp_poll_ms(tcp_now() + 0.5);
    CHECK(ms > 450 && ms <= 501, "half a second: %d ms", ms);
}

/* The gate evicts from the host with the most pending connections (ring/form.c, gate_victim):
 * a host whose address another's begins with must not count as that one, or a flood from
 * 127.0.0.12 counts the predecessor at 127.0.0.1 as one of its own and evicts it. */
static void test_same_host(void) {
    char a[HR_ADDR_LEN], b[HR_ADDR_LEN];
    CHECK(hr_addr_same_host("127.0.0.1:40000", "127.0.0.1:50001"), "one host, two ports");
    CHECK(!hr_addr_same_host("127.0.0.1:40000", "127.0.0.12:50001"), "127.0.0.1 is not 127.0.0.12");
    CHECK(!hr_addr_same_host("127.0.0.12:50001", "127.0.0.1:40000"), "nor the other way round");
    CHECK(!hr_addr_same_host("10.0.0.1:1", "10.0.0.10:1"), "10.0.0.1 is not 10.0.0.10");
    hr_addr(a, sizeof a, "::1", 29400), hr_addr(b, sizeof b, "::1", 29401);
    CHECK(hr_addr_same_host(a, b), "[::1] with two ports: %s %s", a, b);
    hr_addr(b, sizeof b, "::12", 29400);
    CHECK(!hr_addr_same_host(a, b), "[::1] is not [::12]");
    hr_addr(b, sizeof b, "::1:2", 29400);
    CHECK(!hr_addr_same_host(a, b), "[::1] is not [::1:2]: %s %s", a, b);
}

/* A view's entry for this node must be its life and its lineage now: one decided from an older
 * call of the node (its lineage has moved on since) fails, so that an election repairs it. */
static void test_check_own(void) {
    ring_view v = {.epoch = 7, .n = 3, .ids = {0, 2, 5}};
    ring_lineage lin[3] = {{5, 40}, {5, 40}, {3, 12}};
    uint64_t lives[3] = {11, 22, 33};
    ring_lineage mine = {5, 40};
    char err[HR_ERRLEN] = "";
    CHECK(elect_check_own(&v, 1, lin, lives, &mine, 22, err, sizeof err) == HR_OK, "own entry: %s",
          err);
    mine.progress = 41; /* it trained one more iteration since the call the view was decided on */
    CHECK(elect_check_own(&v, 1, lin, lives, &mine, 22, err, sizeof err) == HR_ERR_VIEW,
          "a stale progress was taken");
    CHECK(strstr(err, "view 7 records node 2's state as (view 5, 40 iterations), but it holds "
                      "(view 5, 41 iterations)") != NULL,
          "message: %s", err);
    mine = (ring_lineage){6, 40}; /* it took up another view's state since */
    CHECK(elect_check_own(&v, 1, lin, lives, &mine, 22, err, sizeof err) == HR_ERR_VIEW,
          "a stale epoch was taken");
    mine = (ring_lineage){3, 12};
    CHECK(elect_check_own(&v, 2, lin, lives, &mine, 33, err, sizeof err) == HR_OK, "rank 2: %s",
          err);
    CHECK(elect_check_own(&v, 2, lin, lives, &mine, 34, err, sizeof err) == HR_ERR_VIEW &&
              strstr(err, "earlier life of node 5") != NULL,
          "another life was taken: %s", err);
    CHECK(elect_check_own(&v, 3, lin, lives, &mine, 33, err, sizeof err) == HR_ERR_VIEW,
          "a rank outside the view was taken");
}

/* eng_bf16 rounds to nearest, ties to even, keeps inf and NaN (quiet), and saturates a finite
 * float that would round to inf at the largest finite bf16 with its sign: what it drops is
 * then finite, and exact (the difference of two floats within a factor 2). */
static void test_bf16(void) {
    static const struct {
        uint32_t f;
        uint16_t h;
    } t[] = {
        {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80}, {0x3f818000u, 0x3f82}, {0x3f80ffffu, 0x3f81},
        {0x00000001u, 0x0000}, {0x80000000u, 0x8000}, {0x7f7f0000u, 0x7f7f}, {0x7f7f7fffu, 0x7f7f},
        {0x7f7f8000u, 0x7f7f}, {0x7f7fc000u, 0x7f7f}, {0x7f7fffffu, 0x7f7f}, {0xff7f8000u, 0xff7f},
        {0xff7fffffu, 0xff7f}, {0x7effc000u, 0x7f00}, {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80},
        {0x7fc00000u, 0x7fc0}, {0x7f800001u, 0x7fc0}, {0xffa00000u, 0xffe0},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        float f;
        memcpy(&f, &t[i].f, sizeof f);
        uint16_t h = eng_bf16(f);
        CHECK(h == t[i].h, "eng_bf16(0x%08x) = 0x%04x, expected 0x%04x", t[i].f, h, t[i].h);
    }
    for (uint32_t u = 0x7f7f0000u; u < 0x7f800000u; u += 0x11u) /* finite: finite, and exact */
        for (int neg = 0; neg < 2; neg++) {
            float f;
            uint32_t b = u | (neg ? 0x80000000u : 0);
            memcpy(&f, &b, sizeof f);
            const float w = eng_f32(eng_bf16(f)), d = f - w;
            if (!isfinite(w) || !isfinite(d) || (double)w + d != f) {
                CHECK(0, "eng_bf16(0x%08x): %a, dropping %a", b, w, d);
                return;
            }
        }
}

/* sched_cut is floor(i * e / ns) at sizes where i * e overflows 64 bits. */
static void test_sched_cut(void) {
    static const size_t es[] = {600000000u, (1ull << 33) + 7, (1ull << 40) + 3, (1ull << 62) + 11,
                                SIZE_MAX / 3};
    static const size_t nss[] = {1, 2, 3, 7, 255, 4096, (1u << 20) + 1, 0xfffffffbu};
    for (size_t a = 0; a < sizeof es / sizeof *es; a++)
        for (size_t b = 0; b < sizeof nss / sizeof *nss; b++) {
            const size_t e = es[a], ns = nss[b];
            const size_t is[] = {0, 1, ns / 3, ns / 2, ns - 1, ns};
            for (size_t k = 0; k < sizeof is / sizeof *is; k++) {
                const size_t i = is[k];
                const size_t want = (size_t)((unsigned __int128)i * e / ns),
                             got = sched_cut(i, e, ns);
                CHECK(got == want, "sched_cut(%zu, %zu, %zu) = %zu, expected %zu", i, e, ns, got,
                      want);
            }
        }
}

/* The ring all-reduce's schedule of a buffer above 2^31 and 2^32 bytes (600M floats, 2.4 GB; 2^33
 * floats, 32 GiB), float32 and bf16, on 2, 3 and 7 nodes: the frames each node receives tile its
 * blocks exactly, each fits the frame header's 32-bit length and the segment, and a frame sent
 * waits for the frame received at its place one step before. No buffer is allocated: only the
 * schedule. */
static void test_sched_large(void) {
    static const size_t counts[] = {600000000u, 1ull << 33};
    static const int ns[] = {2, 3, 7};
    ring *r = aligned_alloc(64, (sizeof(ring) + 63) & ~(size_t)63);
    memset(r, 0, sizeof *r);
    r->seg_bytes = 1 << 20;
    if (sched_alloc(r) != HR_OK) {
        CHECK(0, "no memory for a schedule");
        free(r);
        return;
    }
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
        for (size_t esz = 2; esz <= 4; esz += 2)
            for (size_t q = 0; q < sizeof ns / sizeof *ns; q++) {
                const int n = ns[q], k = n - 1;
                const size_t count = counts[c];
                size_t off[16], len[16];
                for (int j = 0; j < n; j++) {
                    const size_t lo = sched_cut((size_t)j, count, (size_t)n),
                                 hi = sched_cut((size_t)j + 1, count, (size_t)n);
                    off[j] = lo * esz, len[j] = (hi - lo) * esz;
                }
                CHECK(off[n - 1] + len[n - 1] == count * esz, "blocks end at %zu, not %zu",
                      off[n - 1] + len[n - 1], count * esz);
                int tx[32], rx[32];
                uint8_t add[32];
                for (int s = 0; s < n - 1; s++) {
                    tx[s] = (k - s + n) % n, rx[s] = (k - s - 1 + 2 * n) % n, add[s] = RX_ADD;
                    tx[n - 1 + s] = (k + 1 - s + n) % n, rx[n - 1 + s] = (k - s + n) % n;
                    add[n - 1 + s] = RX_COPY;
                }
                sched_blocks bl = {off, len};
                if (sched_steps(r, &bl, tx, rx, add, 2 * (n - 1), esz) != HR_OK) {
                    CHECK(0, "no memory for the schedule of %zu elements", count);
                    continue;
                }
                const ring_sched *s = r->sched;
                size_t at = off[rx[0]], j = 0, bad = 0;
                for (int st = 0; st < 2 * (n - 1); st++) {
                    at = off[rx[st]];
                    for (; j < s->n_rx && at < off[rx[st]] + len[rx[st]]; j++) {
                        bad += s->rx_off[j] != at || s->rx_len[j] > r->seg_bytes ||
                               s->rx_len[j] > UINT32_MAX || s->rx_len[j] % esz != 0;
                        at += s->rx_len[j];
                    }
                    bad += at != off[rx[st]] + len[rx[st]];
                }
                bad += j != s->n_rx || s->n_tx != s->n_rx || s->n_rx > UINT32_MAX;
                for (size_t i = 0; i < s->n_tx; i++) /* sent as received the step before */
                    bad += s->tx_need[i] > 0 && (s->rx_off[s->tx_need[i] - 1] != s->tx_off[i] ||
                                                 s->rx_len[s->tx_need[i] - 1] != s->tx_len[i]);
                CHECK(bad == 0, "%zu floats of %zu bytes on %d nodes: %zu frames misplaced of %zu",
                      count, esz, n, bad, s->n_rx);
            }
    sched_free(r);
    free(r);
}

int main(int argc, char **argv) {
    if (sodium_init() < 0) return 1;
    if (argc > 1) {
        if (strcmp(argv[1], "aes256gcm") != 0) {
            fprintf(stderr, "usage: test_ring_unit [aes256gcm]\n");
            return 2;
        }
        if (!crypto_aead_aes256gcm_is_available()) {
            printf("SKIP: AES-256-GCM is not available on this CPU (no AES-NI)\n");
            return 77;
        }
        test_seal(RING_SEC_AUTH, SEC_AEAD_AES256GCM);
        test_seal(RING_SEC_ENCRYPT, SEC_AEAD_AES256GCM);
        test_windows(RING_SEC_AUTH, SEC_AEAD_AES256GCM);
        test_windows(RING_SEC_ENCRYPT, SEC_AEAD_AES256GCM);
        return check_exit();
    }
    test_frame();
    test_seal(RING_SEC_AUTH, SEC_AEAD_XCHACHA20);
    test_seal(RING_SEC_ENCRYPT, SEC_AEAD_XCHACHA20);
    test_windows(RING_SEC_AUTH, SEC_AEAD_XCHACHA20);
    test_windows(RING_SEC_ENCRYPT, SEC_AEAD_XCHACHA20);
    test_key_files();
    test_poll_ms();
    test_same_host();
    test_check_own();
    test_bf16();
    test_sched_cut();
    test_sched_large();
    return check_exit();
}
