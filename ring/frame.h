/*
 * frame.h: the ring's wire frame header.
 *
 * Every frame after the handshake is  header (FRAME_HDR bytes) | payload (len) | tag (0 or 16).
 * Header fields, little-endian:
 *   0  magic   u32  FRAME_MAGIC
 *   4  version u16  FRAME_VERSION
 *   6  type    u8   FRAME_DATA or FRAME_ABORT (FRAME_LOBBY only on lobby connections)
 *   7  coll    u8   the collective (FRAME_COLL_*) the frame belongs to
 *   8  epoch   u64  membership view epoch (I7)
 *   16 seq     u64  collective sequence number within the view
 *   24 index   u32  frame index within the collective
 *   28 len     u32  payload bytes
 * A receiver knows which frame comes next, so it checks every field of a data frame for
 * equality before it reads the payload; in secure modes the header is also authenticated.
 */
#ifndef HR_FRAME_H
#define HR_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define FRAME_MAGIC     0x474e5248u /* "HRNG" */
#define FRAME_VERSION   1
#define FRAME_HDR       32
#define FRAME_ABORT_MAX 512 /* largest abort payload */

enum { FRAME_DATA = 1, FRAME_ABORT = 2, FRAME_LOBBY = 3 /* elect.c's lobby messages */ };
enum {
    FRAME_COLL_ALLREDUCE = 1,
    FRAME_COLL_ALLGATHER = 2,
    FRAME_COLL_BROADCAST = 3,
    FRAME_COLL_BARRIER = 4,
    FRAME_COLL_ALLREDUCE_BF16 = 5, /* ring_allreduce_bf16: bf16 on the wire */
};

typedef struct {
    uint32_t magic;   /* FRAME_MAGIC */
    uint16_t version; /* FRAME_VERSION */
    uint8_t type;     /* FRAME_DATA, FRAME_ABORT */
    uint8_t coll;     /* FRAME_COLL_* */
    uint64_t epoch;   /* view epoch */
    uint64_t seq;     /* collective sequence number */
    uint32_t index;   /* frame index within the collective */
    uint32_t len;     /* payload bytes */
} frame_hdr;

void frame_encode(const frame_hdr *h, uint8_t out[FRAME_HDR]);
void frame_decode(const uint8_t in[FRAME_HDR], frame_hdr *h);
const char *frame_coll_name(int coll);

#endif
