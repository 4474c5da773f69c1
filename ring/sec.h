/*
 * sec.h: the ring's secure channel: keys, the handshake and frame sealing (libsodium).
 *
 * Handshake (initiator I connects to responder R, its successor in the view, or any member for a
 * lobby call):
 *   I -> R  HELLO   magic, version, role, security mode, view epoch, from id, to id,
 *                   segment size, AES support, link kind (ring or tree), tree_bytes,
 *                   ephemeral X25519 key, cluster name hash
 *   R -> I  HELLO   the same from R
 *   R -> I  PROOF   or VERDICT(reject, reason) when I's hello does not fit
 *   I -> R  PROOF   or VERDICT(reject, reason) when R's hello or proof does not check out
 *   R -> I  VERDICT ok, or reject with a reason
 * In auth and encrypt modes each role accepts the other only after the other's PROOF verified:
 * a message out of turn (a verdict "ok" in place of a proof, a second proof), a truncated or
 * oversized message, or silence past the deadline ends the handshake as a failure. In mode
 * none only the hellos and R's verdict are exchanged.
 * TH = BLAKE2b("hetring-hs-v1" | hello_I | hello_R). crypto_kx gives the shared secrets; with a
 * PSK they are mixed with it (keyed BLAKE2b), giving one key per direction and a confirmation
 * key. A PROOF is an Ed25519 signature over (role label | TH) with the node's pinned identity
 * key (zeros in PSK-only mode) and a keyed BLAKE2b MAC of the role label under the confirmation
 * key. Fresh ephemeral keys on both sides make every TH unique, which gives forward secrecy and
 * makes a replayed handshake fail. With a PSK and no identity keys, a proof shows only that the
 * peer holds the PSK: any holder may claim any node id.
 * Lobby: a hello whose epoch is SEC_EPOCH_LOBBY asks for a short membership exchange (elect.c).
 * A responder with accept_lobby takes it from any member of the config other than itself, in
 * place of the expected neighbour, and answers with a lobby hello of its own (epoch
 * SEC_EPOCH_LOBBY, addressed to the caller); the proofs are checked exactly as for a ring link,
 * against the caller's pinned key or the PSK.
 * Tree link: a hello of kind SEC_LINK_TREE asks for the link from a tree parent to its child.
 * A responder with `tree` takes it from expect_tree_id (instead of expect_id) and answers with
 * a tree hello addressed to it.
 *
 * Frames: AES-256-GCM when both ends have AES-NI, else XChaCha20-Poly1305; the nonce is a
 * 64-bit counter per direction, so a replayed, dropped or reordered frame fails to open.
 * Key windows: frame `ctr` of a direction is sealed with the key of window ctr >> shift,
 * derived from the direction's handshake key and the window number (crypto_kdf, BLAKE2b), so
 * both ends change keys at the same frame without a message. `shift` follows from the segment
 * size both hellos carry: 2^shift frames of the largest frame a link takes hold at most
 * 2^SEC_WINDOW_LOG2 bytes, well below the ~350 GB libsodium advises as the most to encrypt
 * under one AES-256-GCM key (XChaCha20-Poly1305 has no such limit; it changes keys alike). In
 * encrypt mode the header is associated data and the payload is encrypted; in auth mode
 * header and payload are both associated data (a MAC only). Keys are wiped with
 * sodium_memzero and never logged.
 */
#ifndef HR_SEC_H
#define HR_SEC_H

#include "base/hr_status.h"
#include "ring/ring_config.h"

#include <sodium.h>
#include <stdint.h>

#define SEC_TAG      16  /* bytes of authentication tag per frame in auth and encrypt modes */
#define SEC_HELLO    192 /* bytes of a hello */
#define SEC_MSG_HDR  8   /* type, status, reserved, length */
#define SEC_PROOF    96  /* signature (64) and MAC (32) */
#define SEC_TEXT_MAX 256 /* longest verdict text */
/* Bytes the initiator sends during a handshake (the tamper test skips them). */
#define SEC_HS_INIT_BYTES_SECURE (SEC_HELLO + SEC_MSG_HDR + SEC_PROOF)
#define SEC_HS_INIT_BYTES_NONE   SEC_HELLO

enum { SEC_AEAD_NONE, SEC_AEAD_AES256GCM, SEC_AEAD_XCHACHA20 };

/* This node's long-term secrets. */
typedef struct {
    int mode;                                    /* ring_security */
    int have_identity;                           /* sign_* hold this node's identity key pair */
    uint8_t sign_pk[crypto_sign_PUBLICKEYBYTES]; /* Ed25519 public key, as pinned in the config */
    uint8_t sign_sk[crypto_sign_SECRETKEYBYTES]; /* Ed25519 secret key */
    int have_psk;                                /* psk holds the cluster pre-shared key */
    uint8_t psk[32];                             /* cluster pre-shared key */
    int window_log2; /* > 0: key windows of at most 2^window_log2 frames (test hook
                      * HETRING_TEST_KEY_WINDOW, set by sec_keys_load); 0: as the segment says */
} sec_keys;

/* Bytes one key window may carry at most: 2^36 (64 GiB, about 69 GB). */
#define SEC_WINDOW_LOG2 36

/* One direction of a channel. The state of window `win` is kept (the key schedule runs once
 * a window); a frame of another window gets a state of its own for that frame. */
typedef struct {
    crypto_aead_aes256gcm_state aes; /* expanded AES-GCM key of window `win` */
    uint8_t key[32];                 /* XChaCha20-Poly1305 key of window `win` */
    uint8_t base[32];                /* the direction's key from the handshake */
    uint64_t win;                    /* the window aes or key belong to */
    unsigned shift;                  /* a window is 2^shift frames (0 to 63) */
    int aead;                        /* SEC_AEAD_* */
    int mode;                        /* ring_security: how frames are protected */
    uint64_t ctr;                    /* nonce counter of the next frame */
} sec_dir;

/* Both directions of one connection. */
typedef struct {
    sec_dir tx; /* frames this node sends */
    sec_dir rx; /* frames this node receives */
} sec_chan;

/* The view epoch a lobby hello carries: a short connection for a membership request (elect.c),
 * not a ring link. No view ever has this epoch. */
#define SEC_EPOCH_LOBBY UINT64_MAX

/* Who the other end of a successful handshake is. */
typedef struct {
    long id;   /* its node id */
    int lobby; /* it made a lobby connection (epoch SEC_EPOCH_LOBBY), not a ring link */
    int tree;  /* it made a tree link (SEC_LINK_TREE), not the ring's */
} sec_hs_peer;

/* Which link of a view a handshake makes: the ring's (successor to predecessor) or the tree's
 * (parent to child, for small all-reduces, ring/tree.c). The kind travels in the hello. */
enum { SEC_LINK_RING = 0, SEC_LINK_TREE = 1 };

/* What a handshake must agree on. */
typedef struct {
    const ring_config *rc; /* cluster name, members and their pinned keys */
    const sec_keys *keys;  /* this node's secrets */
    uint64_t epoch;        /* view epoch both ends must be in (SEC_EPOCH_LOBBY: a lobby call) */
    long self_id;          /* this node */
    long expect_id;        /* the node the view puts at the other end; -1: no view is forming,
                            * so only a lobby hello can be accepted */
    uint32_t seg_bytes;    /* pipeline segment size both ends must use */
    uint32_t tree_bytes;   /* largest all-reduce on the tree, which both ends must use */
    int link;              /* initiator: SEC_LINK_RING or SEC_LINK_TREE */
    int tree;              /* responder: also take a tree link from expect_tree_id */
    long expect_tree_id;   /* the tree parent the view puts at the other end (with tree) */
    int accept_lobby;      /* responder: also accept a lobby hello from any member but itself */
    sec_hs_peer *peer;     /* out, when not NULL: set on success */
} sec_hs_params;

/* Load node rc->self_id's keys as `rc` says (key_file, psk_file, inline psk). The identity key
 * must match the pubkey pinned for this node. Key files readable by group or others are
 * refused. */
hr_status sec_keys_load(sec_keys *k, const ring_config *rc, char *err, size_t errlen);
void sec_keys_free(sec_keys *k);

/* Run the handshake on a connected socket. The initiator is the node that connected. On success
 * the peer is the node `expect_id` and, in auth and encrypt modes, proved it; `ch` is ready. On
 * failure `ch` is wiped and `err` says what was wrong (the caller names the address):
 * HR_ERR_AUTH (no proof, or a proof that does not verify; an unknown node id), HR_ERR_PROTO
 * (cluster, version, mode, id or segment mismatch; a malformed or out-of-turn message),
 * HR_ERR_VIEW (another view epoch or neighbour), or a transport status. `refused` is set when
 * the other end refused this node (its verdict). */
hr_status sec_handshake(int fd, int initiator, const sec_hs_params *p, double deadline,
                        sec_chan *ch, int *refused, char *err, size_t errlen);
void sec_chan_free(sec_chan *ch);
const char *sec_aead_name(int aead);

/* The key window shift of links whose frames carry at most `seg_bytes` of payload (the
 * pipeline segment): 2^shift frames of FRAME_HDR + seg_bytes + 64 + SEC_TAG bytes (a ring's
 * stage, ring/open.c) hold at most 2^SEC_WINDOW_LOG2 bytes. */
unsigned sec_window_shift(uint32_t seg_bytes);
/* Set up one direction from its handshake key: window 0's state, counter 0. */
void sec_dir_init(sec_dir *d, int mode, int aead, const uint8_t key[32], unsigned shift);
/* Keep the state of the window d->ctr is in (once a window; the threaded engine calls it
 * before its threads take a collective, as nothing else may use `d` then). */
void sec_dir_sync(sec_dir *d);

/* Seal `frame` = header(FRAME_HDR) | payload(len) | tag(SEC_TAG). The payload is taken from
 * `src` (which may be frame + FRAME_HDR): encrypted into the frame, or copied for auth. */
void sec_seal(sec_dir *d, uint8_t *frame, const uint8_t *src, size_t len);
/* Verify `frame` and write the payload's plaintext to `dst` (may be frame + FRAME_HDR). Returns
 * 0, or -1 with `dst` wiped when the frame is not authentic. */
int sec_open(sec_dir *d, uint8_t *frame, size_t len, uint8_t *dst)
    __attribute__((warn_unused_result));
/* The same with the frame's nonce counter given and `d` left unchanged: frames of one
 * direction can be sealed and opened on several threads at once (engine_mt.c's threaded engine
 * gives frame i of a collective the counter start + i, as the in-order calls would). A frame
 * outside d's window gets its window's keys made for it, on the stack (a BLAKE2b and, for
 * AES-256-GCM, the key schedule). */
void sec_seal_at(const sec_dir *d, uint64_t ctr, uint8_t *frame, const uint8_t *src, size_t len);
int sec_open_at(const sec_dir *d, uint64_t ctr, uint8_t *frame, size_t len, uint8_t *dst)
    __attribute__((warn_unused_result));

/* Key files: a comment line and 64 hex digits. Reading refuses group/other access. */
hr_status sec_read_key_file(const char *path, uint8_t out[32], char *err, size_t errlen);
/* Write with mode 0600; refuses to replace an existing file unless `force`. */
hr_status sec_write_key_file(const char *path, const uint8_t key[32], const char *comment,
                             int force, char *err, size_t errlen);
/* The Ed25519 public key of an identity seed. */
void sec_identity_public(const uint8_t seed[32], uint8_t pk[32]);

#endif
