/* frame.c: encoding of the ring's frame header (see frame.h). */
#include "ring/frame.h"
#include "ring/bytes.h"

void frame_encode(const frame_hdr *h, uint8_t out[FRAME_HDR]) {
    le_put32(out, h->magic);
    le_put16(out + 4, h->version);
    out[6] = h->type;
    out[7] = h->coll;
    le_put64(out + 8, h->epoch);
    le_put64(out + 16, h->seq);
    le_put32(out + 24, h->index);
    le_put32(out + 28, h->len);
}

void frame_decode(const uint8_t in[FRAME_HDR], frame_hdr *h) {
    h->magic = le_get32(in);
    h->version = le_get16(in + 4);
    h->type = in[6];
    h->coll = in[7];
    h->epoch = le_get64(in + 8);
    h->seq = le_get64(in + 16);
    h->index = le_get32(in + 24);
    h->len = le_get32(in + 28);
}

const char *frame_coll_name(int coll) {
    switch (coll) {
    case FRAME_COLL_ALLREDUCE:
        return "all-reduce";
    case FRAME_COLL_ALLGATHER:
        return "all-gather";
    case FRAME_COLL_BROADCAST:
        return "broadcast";
    case FRAME_COLL_BARRIER:
        return "barrier";
    case FRAME_COLL_ALLREDUCE_BF16:
        return "bf16 all-reduce";
    default:
        return "unknown collective";
    }
}
