/*
 * A v2 batch's record section decompressed in C: gzip, lz4 and zstd with the machine's own libraries (zlib,
 * liblz4, libzstd), opened at import with dlopen, so no header or library is needed to build and a machine without
 * one keeps the Python path (`codecs.decompress`) for its codec; snappy here (no machine has its library by
 * default; its block format is a handful of tags). The framing around them mirrors `codecs.decompress` exactly;
 * anything it would not accept as it is (a check failing, a library error, more than `max_bytes`, a layout only
 * the Python path reads: several zstd frames, a zstd frame without its size that does not fit the first buffer)
 * returns 0 and is left to the Python path, which says why. So a section decompressed here has the bytes the
 * Python path gives, and a section it refuses is refused there with its reason.
 *
 * Why: a log's batches are small (a few records, ~200 bytes), so calling the Python codecs per batch cost more
 * than decompressing.
 */
#include "_native_codecs.h"

#include <dlfcn.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- the libraries */
/* zlib's z_stream, as zlib.h declares it (stable since 1.2; inflateInit2_ checks the size it is given) */
typedef struct {
    const unsigned char *next_in;
    unsigned avail_in;
    unsigned long total_in;
    unsigned char *next_out;
    unsigned avail_out;
    unsigned long total_out;
    const char *msg;
    void *state;
    void *zalloc, *zfree, *opaque;
    int data_type;
    unsigned long adler, reserved;
} z_stream;

#define Z_OK 0
#define Z_STREAM_END 1
#define Z_NO_FLUSH 0

static struct {
    int (*inflateInit2_)(z_stream *, int, const char *, int);
    int (*inflate)(z_stream *, int);
    int (*inflateReset)(z_stream *);
    int (*inflateEnd)(z_stream *);
    const char *(*zlibVersion)(void);
    int (*LZ4_decompress_safe)(const char *, char *, int, int);
    void *(*ZSTD_createDCtx)(void);
    size_t (*ZSTD_freeDCtx)(void *);
    size_t (*ZSTD_decompressDCtx)(void *, void *, size_t, const void *, size_t);
    size_t (*ZSTD_findFrameCompressedSize)(const void *, size_t);
    unsigned long long (*ZSTD_getFrameContentSize)(const void *, size_t);
    unsigned (*ZSTD_isError)(size_t);
    int gzip, lz4, zstd;
} lib;

static void *sym(void *h, const char *name, int *ok) {
    void *p = h ? dlsym(h, name) : NULL;
    if (p == NULL) *ok = 0;
    return p;
}

void native_codecs_load(void) {
    int ok = 1;
    void *z = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    *(void **)&lib.inflateInit2_ = sym(z, "inflateInit2_", &ok);
    *(void **)&lib.inflate = sym(z, "inflate", &ok);
    *(void **)&lib.inflateReset = sym(z, "inflateReset", &ok);
    *(void **)&lib.inflateEnd = sym(z, "inflateEnd", &ok);
    *(void **)&lib.zlibVersion = sym(z, "zlibVersion", &ok);
    lib.gzip = ok;
    ok = 1;
    void *l = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
    *(void **)&lib.LZ4_decompress_safe = sym(l, "LZ4_decompress_safe", &ok);
    lib.lz4 = ok;
    ok = 1;
    void *s = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    *(void **)&lib.ZSTD_createDCtx = sym(s, "ZSTD_createDCtx", &ok);
    *(void **)&lib.ZSTD_freeDCtx = sym(s, "ZSTD_freeDCtx", &ok);
    *(void **)&lib.ZSTD_decompressDCtx = sym(s, "ZSTD_decompressDCtx", &ok);
    *(void **)&lib.ZSTD_findFrameCompressedSize = sym(s, "ZSTD_findFrameCompressedSize", &ok);
    *(void **)&lib.ZSTD_getFrameContentSize = sym(s, "ZSTD_getFrameContentSize", &ok);
    *(void **)&lib.ZSTD_isError = sym(s, "ZSTD_isError", &ok);
    lib.zstd = ok;
}

int native_codec_loaded(int codec) {
    return codec == 1 ? lib.gzip : codec == 2 ? 1 : codec == 3 ? lib.lz4 : codec == 4 ? lib.zstd : 0;
}

void native_out_free(NativeOut *o) {
    PyMem_RawFree(o->buf);
    if (o->dctx != NULL) lib.ZSTD_freeDCtx(o->dctx);
    if (o->zs != NULL) {
        lib.inflateEnd((z_stream *)o->zs);
        PyMem_RawFree(o->zs);
    }
    memset(o, 0, sizeof(*o));
}

/* room for `more` bytes after the `len` held */
static int reserve(NativeOut *o, size_t more) {
    if (o->len + more <= o->cap) return 1;
    size_t cap = o->cap ? o->cap : 1 << 16;
    while (cap < o->len + more) cap *= 2;
    unsigned char *b = PyMem_RawRealloc(o->buf, cap);
    if (b == NULL) return 0;
    o->buf = b;
    o->cap = cap;
    return 1;
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* -------------------------------------------------------------------------------------------------------- gzip */
/* `codecs._gunzip`: the members in sequence, each to its end, every input byte read */
static int gunzip(const unsigned char *src, size_t n, size_t limit, NativeOut *o) {
    if (n == 0 || n > 0xFFFFFFFFu) return 0;
    z_stream *zs = (z_stream *)o->zs;
    if (zs == NULL) {
        if ((zs = PyMem_RawCalloc(1, sizeof(z_stream))) == NULL) return 0;
        if (lib.inflateInit2_(zs, 16 + 15, lib.zlibVersion(), (int)sizeof(z_stream)) != Z_OK) {
            PyMem_RawFree(zs);
            return 0;
        }
        o->zs = zs;
    } else if (lib.inflateReset(zs) != Z_OK) {
        return 0;
    }
    zs->next_in = src;
    zs->avail_in = (unsigned)n;
    for (;;) {
        if (!reserve(o, 1 << 16)) return 0;
        size_t room = o->cap - o->len;
        if (room > limit + 1 - o->len) room = limit + 1 - o->len;
        if (room > 0x40000000u) room = 0x40000000u;
        zs->next_out = o->buf + o->len;
        zs->avail_out = (unsigned)room;
        int r = lib.inflate(zs, Z_NO_FLUSH);
        o->len += room - zs->avail_out;
        if (o->len > limit) return 0;
        if (r == Z_STREAM_END) {
            if (zs->avail_in == 0) return 1;
            if (lib.inflateReset(zs) != Z_OK) return 0;    /* the next member */
            continue;
        }
        if (r != Z_OK) return 0;                         /* a broken or truncated stream */
        if (zs->avail_in == 0 && zs->avail_out != 0) return 0;
    }
}

/* --------------------------------------------------------------------------------------------------------- lz4 */
#define P1 2654435761u
#define P2 2246822519u
#define P3 3266489917u
#define P4 668265263u
#define P5 374761393u
static uint32_t rotl(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

/* XXH32, seed 0, of fewer than 16 bytes (a frame descriptor) */
static uint32_t xxh32_short(const unsigned char *p, size_t n) {
    uint32_t h = P5 + (uint32_t)n;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) h = rotl(h + le32(p + i) * P3, 17) * P4;
    for (; i < n; i++) h = rotl(h + p[i] * P5, 11) * P1;
    h ^= h >> 15;
    h *= P2;
    h ^= h >> 13;
    h *= P3;
    h ^= h >> 16;
    return h;
}

/* `codecs._lz4_frame_decompress(verify_header_checksum=True)`: Kafka's frame, its blocks up to the end mark */
static int unlz4(const unsigned char *d, size_t n, size_t limit, NativeOut *o) {
    if (n < 7 || le32(d) != 0x184D2204u) return 0;
    unsigned flg = d[4], bd = d[5];
    if (((flg >> 6) & 3) != 1 || (flg & 3) || (bd & 0x8F)) return 0;
    unsigned bits = (bd >> 4) & 7;
    if (bits < 4) return 0;
    size_t max_block = (size_t)1 << (16 + 2 * (bits - 4));
    size_t pos = 6 + ((flg & 0x08) ? 8 : 0);
    if (pos >= n || d[pos] != ((xxh32_short(d + 4, pos - 4) >> 8) & 0xFF)) return 0;
    pos++;
    for (;;) {
        if (pos + 4 > n) return 0;
        uint32_t raw = le32(d + pos);
        pos += 4;
        if (raw == 0) return 1;                           /* the end mark; what follows is not read */
        size_t size = raw & 0x7FFFFFFFu;
        if (size > max_block || pos + size > n) return 0;
        if (!reserve(o, max_block)) return 0;
        if (raw & 0x80000000u) {
            memcpy(o->buf + o->len, d + pos, size);
            o->len += size;
        } else {
            int w = lib.LZ4_decompress_safe((const char *)d + pos, (char *)o->buf + o->len, (int)size,
                                            (int)max_block);
            if (w < 0) return 0;
            o->len += (size_t)w;
        }
        pos += size;
        if (o->len > limit) return 0;
        if (flg & 0x10) pos += 4;                         /* a block checksum, not verified (as in Kafka) */
    }
}

/* -------------------------------------------------------------------------------------------------------- zstd */
/* `codecs._unzstd` of one whole frame: into its declared size, or the first buffer `_unzstd` tries */
static int unzstd(const unsigned char *d, size_t n, size_t limit, NativeOut *o) {
    if (n < 6 || le32(d) != 0xFD2FB528u) return 0;
    size_t end = lib.ZSTD_findFrameCompressedSize(d, n);
    if (lib.ZSTD_isError(end) || end != n) return 0;
    unsigned long long declared = lib.ZSTD_getFrameContentSize(d, n);
    /* The frame's window (RFC 8878 3.1.1.1.2; a single segment's is its content size) against libzstd's default
       limit for a stream, 2^27 + 1 bytes: the streaming decoders Kafka (zstd-jni) and the reference read with refuse
       a larger one, where the one-shot call below would read it */
    unsigned long long window = declared;
    if (!(d[4] & 0x20)) {
        unsigned long long base = 1ULL << (10 + (d[5] >> 3));
        window = base + (base / 8) * (d[5] & 7);
    }
    if (window != (unsigned long long)-1 && window > (1ULL << 27) + 1) return 0;
    size_t room = 16 * n > (1 << 16) ? 16 * n : (1 << 16);
    if (room > limit + 1) room = limit + 1;
    if (declared == (unsigned long long)-2) return 0;    /* ZSTD_CONTENTSIZE_ERROR */
    if (declared != (unsigned long long)-1) {            /* not ZSTD_CONTENTSIZE_UNKNOWN */
        if (declared > limit) return 0;                  /* `_unzstd` grows its buffer up to the cap, no further */
        room = declared ? (size_t)declared : 1;
    }
    if (o->dctx == NULL && (o->dctx = lib.ZSTD_createDCtx()) == NULL) return 0;
    if (!reserve(o, room)) return 0;
    size_t w = lib.ZSTD_decompressDCtx(o->dctx, o->buf + o->len, room, d, n);
    if (lib.ZSTD_isError(w)) return 0;
    o->len += w;
    return o->len <= limit;
}

/* ------------------------------------------------------------------------------------------------------ snappy */
/* The raw block's declared length (its leading varint32), or -1 */
static int64_t snappy_raw_len(const unsigned char *d, size_t n, size_t *pos) {
    uint64_t v = 0;
    for (size_t i = 0; i < 5 && i < n; i++) {
        v |= (uint64_t)(d[i] & 0x7F) << (7 * i);
        if (!(d[i] & 0x80)) {
            *pos = i + 1;
            return v > 0xFFFFFFFFu ? -1 : (int64_t)v;
        }
    }
    return -1;
}

/* One raw snappy block (google/snappy format_description.txt) appended to `o`: exactly its declared length, every
 * input byte read, a copy only from bytes already written. The machine has no snappy library to open, and the
 * format is a handful of tags; any block the reference (cramjam's) would refuse is refused here too. */
static int unsnappy_raw(const unsigned char *d, size_t n, size_t limit, NativeOut *o) {
    size_t pos = 0;
    int64_t declared = snappy_raw_len(d, n, &pos);
    if (declared < 0 || o->len + (size_t)declared > limit || !reserve(o, (size_t)declared)) return 0;
    unsigned char *base = o->buf + o->len, *op = base, *end = base + declared;
    while (pos < n) {
        unsigned tag = d[pos++];
        size_t len, offset;
        switch (tag & 3) {
        case 0:
            len = tag >> 2;
            if (len >= 60) {
                size_t k = len - 59;
                if (pos + k > n) return 0;
                len = 0;
                for (size_t i = 0; i < k; i++) len |= (size_t)d[pos + i] << (8 * i);
                pos += k;
            }
            len += 1;
            if (len > n - pos || len > (size_t)(end - op)) return 0;
            memcpy(op, d + pos, len);
            op += len;
            pos += len;
            continue;
        case 1:
            if (pos + 1 > n) return 0;
            len = 4 + ((tag >> 2) & 7);
            offset = (size_t)(tag >> 5) << 8 | d[pos];
            pos += 1;
            break;
        case 2:
            if (pos + 2 > n) return 0;
            len = 1 + (tag >> 2);
            offset = (size_t)d[pos] | (size_t)d[pos + 1] << 8;
            pos += 2;
            break;
        default:
            if (pos + 4 > n) return 0;
            len = 1 + (tag >> 2);
            offset = le32(d + pos);
            pos += 4;
        }
        if (offset == 0 || offset > (size_t)(op - base) || len > (size_t)(end - op)) return 0;
        for (size_t i = 0; i < len; i++) op[i] = op[i - offset];   /* may overlap what it writes */
        op += len;
    }
    if (op != end) return 0;
    o->len += (size_t)declared;
    return 1;
}

static const unsigned char XERIAL_MAGIC[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};

/* `codecs._unsnappy`: snappy-java's xerial framing (its blocks in sequence, a header again between them read
 * past) when the magic is there, else one raw block */
static int unsnappy(const unsigned char *d, size_t n, size_t limit, NativeOut *o) {
    if (n < 8 || memcmp(d, XERIAL_MAGIC, 8) != 0) return unsnappy_raw(d, n, limit, o);
    if (n < 16) return 0;
    size_t pos = 16;
    while (pos < n) {
        if (n - pos >= 8 && memcmp(d + pos, XERIAL_MAGIC, 8) == 0) {
            pos += 16;
            continue;
        }
        if (pos + 4 > n) return 0;
        uint32_t length = (uint32_t)d[pos] << 24 | (uint32_t)d[pos + 1] << 16 | (uint32_t)d[pos + 2] << 8 | d[pos + 3];
        pos += 4;
        if (length > 0x7FFFFFFFu || length > n - pos) return 0;
        if (!unsnappy_raw(d + pos, length, limit, o)) return 0;
        pos += length;
    }
    return 1;
}

int native_decompress(int codec, const unsigned char *src, size_t n, size_t max_bytes, NativeOut *out) {
    if (!native_codec_loaded(codec)) return 0;
    out->len = 0;
    if (codec == 1) return gunzip(src, n, max_bytes, out);
    if (codec == 2) return unsnappy(src, n, max_bytes, out);
    if (codec == 3) return unlz4(src, n, max_bytes, out);
    return unzstd(src, n, max_bytes, out);
}
