/* A v2 batch's record section decompressed in C (_native_codecs.c). */
#ifndef OFFSETLAKE_NATIVE_CODECS_H
#define OFFSETLAKE_NATIVE_CODECS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A caller's output buffer and codec state, reused from batch to batch; zeroed to start, `native_out_free`d */
typedef struct {
    unsigned char *buf;
    size_t cap, len;
    void *dctx; /* zstd */
    void *zs;   /* zlib */
} NativeOut;

/* opens the machine's zlib, liblz4 and libzstd (each that is there), once; snappy needs none */
void native_codecs_load(void);
/* 1: the codec (attributes & 7) is decompressed here */
int native_codec_loaded(int codec);
/* 1: `src` decompressed into out->buf[0:out->len]; 0: left to the Python path (see _native_codecs.c) */
int native_decompress(int codec, const unsigned char *src, size_t n, size_t max_bytes, NativeOut *out);
void native_out_free(NativeOut *out);
#endif
