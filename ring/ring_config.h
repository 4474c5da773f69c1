/*
 * ring_config.h: what the ring and its handshake need to know, and nothing else.
 *
 * The ring knows nothing of training or of the INI file: the application converts its cluster
 * configuration into a ring_config once (cluster/ring_setup.h) and hands it to ring_init, which
 * keeps its own copy. Limits and the security mode's values are the INI schema's; the
 * application checks that they agree at compile time.
 *
 * Secrets: `psk` may hold the cluster's inline pre-shared key. Whoever owns a ring_config wipes
 * it with ring_config_wipe when done (ring_free does so for the ring's copy).
 */
#ifndef HR_RING_CONFIG_H
#define HR_RING_CONFIG_H

#include <sodium.h>
#include <stdint.h>

#define RING_STR       128   /* bytes of a host name or cluster name, NUL included */
#define RING_PATH      512   /* bytes of a file path, NUL included */
#define RING_MAX_NODES 256   /* members of a cluster */
#define RING_KEYLEN    32    /* bytes of a public key or pre-shared key */
#define RING_AGREE_MAX 16384 /* bytes of the configuration text members compare */

/* How ring links are protected. The values travel in the handshake's hello (one byte), so
 * they never change; 0 is not a mode. */
typedef enum { RING_SEC_NONE = 1, RING_SEC_AUTH = 2, RING_SEC_ENCRYPT = 3 } ring_security;

/* One member of the cluster. */
typedef struct {
    long id;                     /* node id; ring order is ascending id */
    char host[RING_STR];         /* address the node listens on */
    long port;                   /* TCP port the node listens on */
    uint8_t pubkey[RING_KEYLEN]; /* pinned Ed25519 identity public key */
    int has_pubkey;              /* pubkey was given */
} ring_member;

typedef struct {
    char name[RING_STR];                 /* cluster name, checked in every handshake */
    int security;                        /* ring_security */
    long self_id;                        /* this node's id; must be one of members[] */
    ring_member members[RING_MAX_NODES]; /* every node, ascending id */
    int n_members;                       /* entries used in members[] */
    double connect_timeout;              /* seconds for formation: lookups, connects */
    double timeout;                      /* seconds any blocking I/O may take without progress */
    long segment_bytes;                  /* all-reduce pipeline segment, bytes; 0 = default */
    long tree_bytes;                     /* largest all-reduce on the view's tree; 0 = no tree */
    char key_file[RING_PATH];            /* this node's identity secret key file; "" = none */
    char psk_file[RING_PATH];            /* cluster pre-shared key file; "" = none */
    uint8_t psk[RING_KEYLEN];            /* inline pre-shared key (if no psk_file); secret */
    int has_psk;                         /* psk was given */
    char label[RING_PATH];               /* where the config came from, for messages; "" = none */
    char port_where[RING_PATH];          /* where this node's port is set ("FILE:LINE: [node.N]
                                          * port = P"), leading the error of a listen that
                                          * failed; "" = none */
    /* what every member's configuration must agree on: lines "[section]" and "key = value"
     * (the application's canonical text); a peer whose text differs is never taken into a
     * view, and the differing keys are named. agree_len 0: no check */
    char agree[RING_AGREE_MAX];
    size_t agree_len;
    /* elastic membership (ring_elect) */
    int min_nodes;         /* quorum: members a view needs; 0 = floor(n_members / 2) + 1 */
    double rejoin_timeout; /* seconds ring_elect keeps trying to reach a quorum */
} ring_config;

/* Index of member `id` in rc->members, or -1. */
static inline int ring_config_index(const ring_config *rc, long id) {
    for (int i = 0; i < rc->n_members; i++)
        if (rc->members[i].id == id) return i;
    return -1;
}

/* "none", "auth", "encrypt", or "?" for a value that is not a mode. */
static inline const char *ring_security_name(int mode) {
    switch (mode) {
    case RING_SEC_NONE:
        return "none";
    case RING_SEC_AUTH:
        return "auth";
    case RING_SEC_ENCRYPT:
        return "encrypt";
    default:
        return "?";
    }
}

/* Wipe the secrets of `rc` (the inline PSK). */
static inline void ring_config_wipe(ring_config *rc) {
    sodium_memzero(rc->psk, sizeof rc->psk);
    rc->has_psk = 0;
}

#endif
