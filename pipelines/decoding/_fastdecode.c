/*
 * Optional C fast path for pipelines/decoding/columnar.py: walks the entries of a segment (framing, the magic 2
 * batch header, CRC-32C, the record walk, OffsetCommit key/value decode) and writes the values straight into
 * typed column buffers, so a clean record costs no Python object: its key columns too are read from its own key
 * bytes, row by row (a table of the keys met would cost a lookup per record, which misses the cache once a hot
 * partition's keys outgrow it, and an object per new key). A classic group's GroupMetadata record (v0-v3) is read
 * here too, its values (members as rows._member_dict makes them) appended to the sparse columns' lists.
 *
 * Columns(typecodes)            growable Arrow-layout columns, one per typecode:
 *                               'q' int64, 'i' int32, 'h' int16, 'b' int8, '?' bool, 's' utf-8 string
 *   .append(tuple) / .extend(rows)    one row of Python values (None = null)
 *   .truncate(n), len()
 *   .take() -> [(null_count, validity | None, data, offsets | None)]   the buffers, and the columns emptied
 *
 * decode_entries(buf, pos, end, max_rows, hot, batch, ctl_types, ctl_epochs, group_values, decompress, max_bytes,
 *                partition) -> pos
 *   Decodes whole entries from `pos` while each one is a magic 2 batch it fully understands, appending one row per
 *   record to `hot` (columnar.HOT_COLUMNS) and to `batch` (columnar.BATCH_COLUMNS: its batch's values).
 *   Returns the position of the first entry it leaves to the Python path (anything unusual: a short tail, a
 *   legacy entry, a bad CRC, a decompression error, record headers, a record that is not a plain offset commit, a
 *   classic group's GroupMetadata of v0-v3 or a transaction marker, ...), or the position after the entry that
 *   brought `hot` to `max_rows`. A batch it leaves is rolled back completely (`group_values` too: a list per
 *   columnar.GROUP_VALUE_COLUMNS), so the Python path decodes it from scratch with the same result as before.
 *
 * The Python path (columnar._walk_v2 + batches.decode_entry) is the reference: rows are identical either way.
 *
 * Built with it: _native_codecs.c (a record section decompressed in C) and _python_rows.c (`python_rows`: the rows
 * the Python loaders read, made from decoded Arrow columns' buffers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "_native_codecs.h"
#include "_python_rows.h"
#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

/* a record kind's label: the str `init` was given, held, and its utf-8 */
typedef struct {
    PyObject *obj;
    const char *s;
    Py_ssize_t n;
} Label;
static Label OffsetCommitKind, GroupMetadataKind, ConsumerGroupKind, ControlKind;
static PyObject *ControlNames = NULL;  /* dict int -> name */
static PyObject *TsTypes = NULL;       /* (CreateTime, LogAppendTime) as utf-8 bytes */
static PyObject *CodecLabels = NULL;   /* 8 codec labels as utf-8 bytes */

/* ============================================================================================== CRC-32C */
static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc32c_sw(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c;
        c = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^ crc_table[5][(w >> 16) & 0xFF] ^
            crc_table[4][(w >> 24) & 0xFF] ^ crc_table[3][(w >> 32) & 0xFF] ^ crc_table[2][(w >> 40) & 0xFF] ^
            crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(const unsigned char *p, size_t n) {
    uint64_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32 ^ 0xFFFFFFFFu;
}
#endif

static uint32_t (*crc32c)(const unsigned char *, size_t) = crc32c_sw;

/* ============================================================================================== columns */
typedef struct {
    char type;
    int width;         /* bytes per value; 0 for bool (a bitmap) and string (offsets + data) */
    uint8_t *valid;    /* validity bitmap */
    uint8_t *data;     /* values, bool bitmap, or string bytes */
    int32_t *offs;     /* string offsets, n + 1 */
    Py_ssize_t dlen, dcap, cap, nulls;
    Py_ssize_t cap_hint, dcap_hint; /* the capacities of the chunk take() handed over: the next one starts there */
} Col;

typedef struct {
    PyObject_HEAD
    int ncols;
    Col *cols;
    Py_ssize_t n;
} Columns;

static int col_width(char t) {
    switch (t) {
        case 'q': return 8;
        case 'i': return 4;
        case 'h': return 2;
        case 'b': return 1;
        case '?': case 's': return 0;
    }
    return -1;
}

/* room for row index n (all columns); 0 / -1 (MemoryError) */
static int cols_reserve(Columns *c, Py_ssize_t n) {
    if (n < c->cols[0].cap) return 0;
    Py_ssize_t cap = c->cols[0].cap ? c->cols[0].cap : c->cols[0].cap_hint ? c->cols[0].cap_hint : 1024;
    while (cap <= n) cap *= 2;
    for (int j = 0; j < c->ncols; j++) {
        Col *k = &c->cols[j];
        Py_ssize_t oldb = (k->cap + 7) / 8, newb = (cap + 7) / 8;
        uint8_t *v = PyMem_Realloc(k->valid, newb);
        if (v == NULL) goto nomem;
        memset(v + oldb, 0, newb - oldb);
        k->valid = v;
        if (k->type == '?') {
            uint8_t *d = PyMem_Realloc(k->data, newb);
            if (d == NULL) goto nomem;
            memset(d + oldb, 0, newb - oldb);
            k->data = d;
        } else if (k->type == 's') {
            int32_t *o = PyMem_Realloc(k->offs, (cap + 1) * sizeof(int32_t));
            if (o == NULL) goto nomem;
            if (k->cap == 0) o[0] = 0;
            k->offs = o;
        } else {
            uint8_t *d = PyMem_Realloc(k->data, cap * k->width);
            if (d == NULL) goto nomem;
            k->data = d;
        }
        k->cap = cap;
    }
    return 0;
nomem:
    PyErr_NoMemory();
    return -1;
}

static inline void set_bit(uint8_t *bm, Py_ssize_t i, int on) {
    if (on) bm[i >> 3] |= (uint8_t)(1u << (i & 7));
    else bm[i >> 3] &= (uint8_t)~(1u << (i & 7));
}

/* the put_* functions write row c->n of column j (cols_reserve(c, c->n) done) */
static inline void put_null(Columns *c, int j) {
    Col *k = &c->cols[j];
    set_bit(k->valid, c->n, 0);
    k->nulls++;
    if (k->type == '?') set_bit(k->data, c->n, 0);
    else if (k->type == 's') k->offs[c->n + 1] = (int32_t)k->dlen;
    else memset(k->data + c->n * k->width, 0, k->width);
}

static inline void put_int(Columns *c, int j, int64_t v) {
    Col *k = &c->cols[j];
    set_bit(k->valid, c->n, 1);
    switch (k->width) {
        case 8: { memcpy(k->data + c->n * 8, &v, 8); break; }
        case 4: { int32_t x = (int32_t)v; memcpy(k->data + c->n * 4, &x, 4); break; }
        case 2: { int16_t x = (int16_t)v; memcpy(k->data + c->n * 2, &x, 2); break; }
        case 1: { int8_t x = (int8_t)v; k->data[c->n] = (uint8_t)x; break; }
    }
}

static inline void put_bool(Columns *c, int j, int v) {
    Col *k = &c->cols[j];
    set_bit(k->valid, c->n, 1);
    set_bit(k->data, c->n, v);
}

static int put_bytes(Columns *c, int j, const void *p, Py_ssize_t len) {
    Col *k = &c->cols[j];
    if (k->dlen + len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "string column over 2 GiB in one chunk");
        return -1;
    }
    if (k->dlen + len > k->dcap) {
        Py_ssize_t cap = k->dcap ? k->dcap : k->dcap_hint ? k->dcap_hint : 4096;
        while (cap < k->dlen + len) cap *= 2;
        uint8_t *d = PyMem_Realloc(k->data, cap);
        if (d == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        k->data = d;
        k->dcap = cap;
    }
    if (len) memcpy(k->data + k->dlen, p, len);
    k->dlen += len;
    set_bit(k->valid, c->n, 1);
    k->offs[c->n + 1] = (int32_t)k->dlen;
    return 0;
}

/* bytes decoded as str(b, "utf-8", "replace") would be, as utf-8 */
static int put_utf8_replace(Columns *c, int j, const unsigned char *p, Py_ssize_t len) {
    Py_ssize_t i = 0;
    while (i < len && p[i] < 0x80) i++;
    if (i == len) return put_bytes(c, j, p, len);
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, len, "replace");
    if (s == NULL) return -1;
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    int r = u == NULL ? -1 : put_bytes(c, j, u, n);
    Py_DECREF(s);
    return r;
}

static void cols_truncate(Columns *c, Py_ssize_t n) {
    if (n >= c->n) return;
    for (int j = 0; j < c->ncols; j++) {
        Col *k = &c->cols[j];
        Py_ssize_t nulls = 0;
        for (Py_ssize_t i = n; i < c->n; i++) nulls += !((k->valid[i >> 3] >> (i & 7)) & 1);
        k->nulls -= nulls;
        if (k->type == 's') k->dlen = k->offs[n];
    }
    c->n = n;
}

static int put_pyvalue(Columns *c, int j, PyObject *v) {
    Col *k = &c->cols[j];
    if (v == Py_None) {
        put_null(c, j);
        return 0;
    }
    if (k->type == 's') {
        if (!PyUnicode_Check(v)) {
            PyErr_Format(PyExc_TypeError, "column %d: expected str, not %s", j, Py_TYPE(v)->tp_name);
            return -1;
        }
        Py_ssize_t n;
        const char *u = PyUnicode_AsUTF8AndSize(v, &n);
        return u == NULL ? -1 : put_bytes(c, j, u, n);
    }
    if (k->type == '?') {
        if (!PyBool_Check(v)) {
            PyErr_Format(PyExc_TypeError, "column %d: expected bool, not %s", j, Py_TYPE(v)->tp_name);
            return -1;
        }
        put_bool(c, j, v == Py_True);
        return 0;
    }
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "column %d: expected int, not %s", j, Py_TYPE(v)->tp_name);
        return -1;
    }
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    int64_t lo = k->width == 8 ? INT64_MIN : -((int64_t)1 << (8 * k->width - 1));
    int64_t hi = k->width == 8 ? INT64_MAX : ((int64_t)1 << (8 * k->width - 1)) - 1;
    if (x < lo || x > hi) {
        PyErr_Format(PyExc_OverflowError, "column %d: %lld out of range for int%d", j, x, 8 * k->width);
        return -1;
    }
    put_int(c, j, x);
    return 0;
}

static int append_tuple(Columns *c, PyObject *row) {
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != c->ncols) {
        PyErr_Format(PyExc_TypeError, "expected a tuple of %d values", c->ncols);
        return -1;
    }
    if (cols_reserve(c, c->n) < 0) return -1;
    Py_ssize_t n0 = c->n;
    for (int j = 0; j < c->ncols; j++) {
        if (put_pyvalue(c, j, PyTuple_GET_ITEM(row, j)) < 0) {
            /* column j wrote nothing; undo 0..j-1 */
            for (int i = 0; i < j; i++) {
                Col *k = &c->cols[i];
                if (!((k->valid[n0 >> 3] >> (n0 & 7)) & 1)) k->nulls--;
                if (k->type == 's') k->dlen = k->offs[n0];
            }
            return -1;
        }
    }
    c->n++;
    return 0;
}

static PyObject *Columns_append(Columns *self, PyObject *row) {
    if (append_tuple(self, row) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Columns_extend(Columns *self, PyObject *rows) {
    PyObject *seq = PySequence_Fast(rows, "extend() takes a sequence of tuples");
    if (seq == NULL) return NULL;
    Py_ssize_t n0 = self->n;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        if (append_tuple(self, PySequence_Fast_GET_ITEM(seq, i)) < 0) {
            cols_truncate(self, n0);
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

static PyObject *Columns_truncate(Columns *self, PyObject *arg) {
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "negative length");
        return NULL;
    }
    cols_truncate(self, n);
    Py_RETURN_NONE;
}

/* A buffer take() hands over: the memory a column was written in, freed with the object (Arrow holds it through the
 * buffer protocol, `pa.py_buffer`). A copy into a bytes object cost a pass over every column of every chunk. */
typedef struct {
    PyObject_HEAD
    void *ptr;
    Py_ssize_t len;
} Buffer;

static int Buffer_getbuffer(Buffer *self, Py_buffer *view, int flags) {
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)self, self->ptr ? self->ptr : empty, self->len, 1, flags);
}

static void Buffer_dealloc(Buffer *self) {
    PyMem_Free(self->ptr);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs Buffer_as_buffer = {.bf_getbuffer = (getbufferproc)Buffer_getbuffer};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pipelines.decoding._fastdecode.Buffer",
    .tp_basicsize = sizeof(Buffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_as_buffer = &Buffer_as_buffer,
};

/* a Buffer that owns p (cut to its first len bytes); the caller drops its pointer. NULL: MemoryError, p untouched */
static PyObject *handed_over(void *p, Py_ssize_t len) {
    Buffer *b = PyObject_New(Buffer, &BufferType);
    if (b == NULL) return NULL;
    if (p != NULL) {  /* cut to what it holds: the chunks a range hands on stay in memory as they are */
        void *fit = PyMem_Realloc(p, len ? len : 1);
        if (fit != NULL) p = fit;
    }
    b->ptr = p;
    b->len = len;
    return (PyObject *)b;
}

/* every column emptied, its buffers freed or handed over: the rows are gone */
static void cols_reset(Columns *c) {
    for (int j = 0; j < c->ncols; j++) {
        Col *k = &c->cols[j];
        PyMem_Free(k->valid);
        PyMem_Free(k->data);
        PyMem_Free(k->offs);
        k->valid = k->data = NULL;
        k->offs = NULL;
        k->cap = k->dcap = k->dlen = k->nulls = 0;
    }
    c->n = 0;
}

static PyObject *Columns_take(Columns *self, PyObject *unused) {
    Py_ssize_t n = self->n;
    PyObject *out = PyList_New(self->ncols);
    if (out == NULL) return NULL;
    for (int j = 0; j < self->ncols; j++) {
        Col *k = &self->cols[j];
        Py_ssize_t bm = (n + 7) / 8;
        PyObject *valid, *data, *offs;
        if (n == 0) {  /* nothing written: empty buffers, the column's own kept */
            valid = Py_None;
            Py_INCREF(valid);
            data = PyBytes_FromStringAndSize(NULL, 0);
            offs = k->type == 's' ? PyBytes_FromStringAndSize(NULL, 0) : Py_None;
            if (offs == Py_None) Py_INCREF(offs);
        } else {
            if (k->nulls) {
                if ((valid = handed_over(k->valid, bm)) != NULL) k->valid = NULL;
            } else {
                valid = Py_None;
                Py_INCREF(valid);
            }
            if ((data = handed_over(k->data, k->type == 's' ? k->dlen : k->type == '?' ? bm : n * k->width)) != NULL)
                k->data = NULL;
            if (k->type == 's') {
                if ((offs = handed_over(k->offs, (n + 1) * (Py_ssize_t)sizeof(int32_t))) != NULL) k->offs = NULL;
            } else {
                offs = Py_None;
                Py_INCREF(offs);
            }
        }
        PyObject *t = (valid && data && offs) ? Py_BuildValue("(nNNN)", k->nulls, valid, data, offs) : NULL;
        if (t == NULL) {
            if (!(valid && data && offs)) { Py_XDECREF(valid); Py_XDECREF(data); Py_XDECREF(offs); }
            Py_DECREF(out);
            cols_reset(self);
            return NULL;
        }
        PyList_SET_ITEM(out, j, t);
    }
    for (int j = 0; j < self->ncols; j++) {
        Col *k = &self->cols[j];
        if (n) {
            /* the next chunk is written in buffers of its own, allocated at the sizes this one reached (a validity
             * with no null in it was not handed over: freed) */
            k->cap_hint = k->cap;
            k->dcap_hint = k->dcap;
            PyMem_Free(k->valid);
            PyMem_Free(k->data);
            PyMem_Free(k->offs);
            k->valid = k->data = NULL;
            k->offs = NULL;
            k->cap = k->dcap = 0;
        }
        k->nulls = 0;
        k->dlen = 0;
    }
    self->n = 0;
    return out;
}

static Py_ssize_t Columns_len(Columns *self) { return self->n; }

static int Columns_init(Columns *self, PyObject *args, PyObject *kwds) {
    const char *types;
    if (!PyArg_ParseTuple(args, "s", &types)) return -1;
    int n = (int)strlen(types);
    if (n == 0 || self->cols != NULL) {
        PyErr_SetString(PyExc_ValueError, "Columns(typecodes): one or more of q i h b ? s, once");
        return -1;
    }
    self->cols = PyMem_Calloc(n, sizeof(Col));
    if (self->cols == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->ncols = n;
    for (int j = 0; j < n; j++) {
        int w = col_width(types[j]);
        if (w < 0) {
            PyErr_Format(PyExc_ValueError, "unknown typecode %c", types[j]);
            return -1;
        }
        self->cols[j].type = types[j];
        self->cols[j].width = w;
    }
    return cols_reserve(self, 0);
}

static void Columns_dealloc(Columns *self) {
    for (int j = 0; self->cols && j < self->ncols; j++) {
        PyMem_Free(self->cols[j].valid);
        PyMem_Free(self->cols[j].data);
        PyMem_Free(self->cols[j].offs);
    }
    PyMem_Free(self->cols);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Columns_methods[] = {
    {"append", (PyCFunction)Columns_append, METH_O, "append(tuple): one row"},
    {"extend", (PyCFunction)Columns_extend, METH_O, "extend(rows): rows of tuples"},
    {"truncate", (PyCFunction)Columns_truncate, METH_O, "truncate(n): keep the first n rows"},
    {"take", (PyCFunction)Columns_take, METH_NOARGS, "take() -> [(null_count, validity, data, offsets)], each buffer the column's own memory; empties"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Columns_as_sequence = {.sq_length = (lenfunc)Columns_len};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pipelines.decoding._fastdecode.Columns",
    .tp_basicsize = sizeof(Columns),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Columns_init,
    .tp_dealloc = (destructor)Columns_dealloc,
    .tp_methods = Columns_methods,
    .tp_as_sequence = &Columns_as_sequence,
};

/* ============================================================================================== the walk */
enum { H_OFFSET, H_TS, H_KIND, H_KTYPE, H_GROUP, H_TOPIC, H_PART, H_TOMB, H_VER, H_COMMITTED, H_EPOCH, H_META, H_CTS,
       H_ETS, H_TOPIC_ID, H_NCOLS };
enum { B_PART, B_BASE, B_FIRST, B_LAST, B_POS, B_TSTYPE, B_PID, B_PEPOCH, B_TXN, B_CONTROL, B_MAGIC,
       B_CODEC, B_NCOLS };

/* a + b as Java's long arithmetic gives it, wrapped (a signed overflow is undefined in C): offsets and timestamps are
 * a base plus a delta, and a crafted batch near the end of the range wraps, as Kafka's sums do */
static inline int64_t long_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }

/* zig-zag varint, at most maxb bytes; 0 = ok, -1 = malformed */
static inline int read_varint(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, int maxb, int64_t *out) {
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos, start = p;
    for (;;) {
        if (p >= end) return -1;
        unsigned char c = b[p++];
        if (shift == 63 && (c & 0x7F) > 1) return -1;
        raw |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80) break;
        shift += 7;
        if (p - start >= maxb) return -1;
    }
    *pos = p;
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

static inline int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int16_t be16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }
static inline unsigned be16u(const unsigned char *p) { return ((unsigned)p[0] << 8) | p[1]; }

/* Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, no padding (22 characters) */
/* FileLogInputStream.nextBatch's framing, as `framing.frame_entry` does it: the size of the entry at m[pos]
   (LOG_OVERHEAD + its size field) when it lies whole within m[0, end), else 0: HEADER_SIZE_UP_TO_MAGIC bytes or
   fewer left, a size under LEGACY_RECORD_OVERHEAD_V0, or an entry running past the end. */
static inline Py_ssize_t frame_entry(const unsigned char *m, Py_ssize_t pos, Py_ssize_t end) {
    if (end - pos <= 17) return 0;
    int32_t size = be32(m + pos + 8);
    if (size < 14) return 0;
    Py_ssize_t total = 12 + (Py_ssize_t)size;
    return total > end - pos ? 0 : total;
}

static void uuid_str(const unsigned char *u, char out[22]) {
    static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    int o = 0;
    for (int i = 0; i < 15; i += 3) {
        uint32_t v = ((uint32_t)u[i] << 16) | ((uint32_t)u[i + 1] << 8) | u[i + 2];
        out[o++] = alpha[(v >> 18) & 63];
        out[o++] = alpha[(v >> 12) & 63];
        out[o++] = alpha[(v >> 6) & 63];
        out[o++] = alpha[v & 63];
    }
    out[o++] = alpha[u[15] >> 2];
    out[o++] = alpha[(u[15] & 3) << 4];
}

/*
 * OffsetCommitValue at b[vs:ve] into the value columns of row hot->n; 1 = written, 0 = not decoded here (the
 * Python path will), -1 = error. The acceptance matches columnar._walk_v2 / _other_value exactly.
 */
static int put_value(Columns *h, const unsigned char *b, Py_ssize_t vs, Py_ssize_t ve) {
    Py_ssize_t n = ve - vs;
    if (n < 2 || b[vs] != 0) return 0;
    int ver = b[vs + 1];
    if (ver == 3) {
        if (n < 16) return 0;
        unsigned ml = be16u(b + vs + 14);
        Py_ssize_t e = vs + 16 + ml;
        if (ml >= 0x8000 || e + 8 != ve) return 0;
        if (put_utf8_replace(h, H_META, b + vs + 16, ml) < 0) return -1;
        put_int(h, H_VER, 3);
        put_int(h, H_COMMITTED, be64(b + vs + 2));
        put_int(h, H_EPOCH, be32(b + vs + 10));
        put_int(h, H_CTS, be64(b + e));
        put_null(h, H_ETS);
        put_null(h, H_TOPIC_ID);
        return 1;
    }
    if (ver == 0 || ver == 1 || ver == 2) {
        if (n < 12) return 0;
        unsigned ml = be16u(b + vs + 10);
        Py_ssize_t e = vs + 12 + ml;
        if (ml >= 0x8000 || e + (ver == 1 ? 16 : 8) != ve) return 0;
        if (put_utf8_replace(h, H_META, b + vs + 12, ml) < 0) return -1;
        put_int(h, H_VER, ver);
        put_int(h, H_COMMITTED, be64(b + vs + 2));
        put_int(h, H_EPOCH, -1);
        put_int(h, H_CTS, be64(b + e));
        if (ver == 1) put_int(h, H_ETS, be64(b + e + 8));
        else put_null(h, H_ETS);
        put_null(h, H_TOPIC_ID);
        return 1;
    }
    if (ver == 4) {
        if (n < 15) return 0;
        Py_ssize_t p = vs + 14;
        unsigned c = b[p];
        if (c == 0 || c >= 0x80) return 0;  /* null metadata (an error) or a long one */
        Py_ssize_t e = p + c;
        if (e + 8 > ve) return 0;
        Py_ssize_t q = e + 8;
        int tid;
        if (q == ve || (q + 1 == ve && b[q] == 0)) tid = 0;
        else if (q + 19 == ve && b[q] == 1 && b[q + 1] == 0 && b[q + 2] == 16) tid = 1;
        else return 0;
        if (put_utf8_replace(h, H_META, b + p + 1, (Py_ssize_t)c - 1) < 0) return -1;
        if (tid) {
            char s[22];
            uuid_str(b + q + 3, s);
            if (put_bytes(h, H_TOPIC_ID, s, 22) < 0) return -1;
        } else {
            put_null(h, H_TOPIC_ID);
        }
        put_int(h, H_VER, 4);
        put_int(h, H_COMMITTED, be64(b + vs + 2));
        put_int(h, H_EPOCH, be32(b + vs + 10));
        put_int(h, H_CTS, be64(b + e));
        put_null(h, H_ETS);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------ GroupMetadataValue v0-v3
 * A classic group's value, as the Python reference reads it (messages.read_group_message_value, then
 * rows._member_dict with consumer_protocol's lenient readers for a "consumer" group's members), into the values of
 * the row's group columns. Only what the reference reads without complaint is read here: anything it refuses (v4,
 * a bad length, a null member field, trailing bytes) leaves the record to the Python path, which says why.
 * A member is a tuple of the reference dict's values in its keys' order, its topic partitions (topic, partitions)
 * tuples: the order of the `members` column's struct fields (`MEMBER_FIELDS`, which `native` checks), so Arrow
 * builds the column from them by position, where a dict costs a lookup per field (and here a dict of 15 keys). */
enum { G_PROTOCOL_TYPE, G_GENERATION, G_PROTOCOL, G_LEADER, G_STATE_TS, G_MEMBERS, G_NCOLS };
enum { M_MEMBER_ID, M_INSTANCE, M_CLIENT_ID, M_CLIENT_HOST, M_REBALANCE, M_SESSION, M_SUBSCRIPTION, M_ASSIGNMENT,
       M_SUB_VERSION, M_TOPICS, M_OWNED, M_SUB_GENERATION, M_RACK, M_ASSIGNED, M_ASG_VERSION, M_NKEYS };
static const char *MemberKeyNames[M_NKEYS] = {
    "member_id", "group_instance_id", "client_id", "client_host", "rebalance_timeout_ms", "session_timeout_ms",
    "subscription", "assignment", "subscription_version", "subscribed_topics", "owned_partitions",
    "subscription_generation_id", "subscription_rack_id", "assigned_partitions", "assignment_version"};

static int append_pair(PyObject *list, Py_ssize_t i, PyObject *v /* stolen */);

typedef struct {
    const unsigned char *b;
    Py_ssize_t pos, end;
} Rd;

/* 1 = read, 0 = not there (the reference raises) */
static inline int rd_i16(Rd *r, int *out) {
    if (r->end - r->pos < 2) return 0;
    *out = be16(r->b + r->pos);
    r->pos += 2;
    return 1;
}
static inline int rd_i32(Rd *r, int32_t *out) {
    if (r->end - r->pos < 4) return 0;
    *out = be32(r->b + r->pos);
    r->pos += 4;
    return 1;
}
static inline int rd_i64(Rd *r, int64_t *out) {
    if (r->end - r->pos < 8) return 0;
    *out = be64(r->b + r->pos);
    r->pos += 8;
    return 1;
}

/* primitives.read_string / read_nullable_string: 1 = *out a new str (or None), 0 = refused, -1 = error */
static int rd_str(Rd *r, int nullable, PyObject **out) {
    int len;
    if (!rd_i16(r, &len)) return 0;
    if (len < 0) {  /* any negative length is null, as Kafka's generated readers read it */
        if (!nullable) return 0;
        *out = Py_NewRef(Py_None);
        return 1;
    }
    if (len > r->end - r->pos) return 0;
    *out = PyUnicode_DecodeUTF8((const char *)r->b + r->pos, len, "replace");
    if (*out == NULL) return -1;
    r->pos += len;
    return 1;
}

/* primitives.read_nullable_bytes: 1 = read (*start, *len; *len -1: null), 0 = refused */
static int rd_bytes(Rd *r, Py_ssize_t *start, Py_ssize_t *len) {
    int32_t n;
    if (!rd_i32(r, &n)) return 0;
    if (n < 0) {  /* any negative length is null (rd_str) */
        *start = r->pos;
        *len = -1;
        return 1;
    }
    if (n > r->end - r->pos) return 0;
    *start = r->pos;
    *len = n;
    r->pos += n;
    return 1;
}

/* primitives.read_array_count of a non-null array: 1 = *n, 0 = refused (null, negative, more than can fit) */
static int rd_count(Rd *r, int32_t *n) {
    if (!rd_i32(r, n)) return 0;
    return *n >= 0 && *n <= r->end - r->pos;
}

/* consumer_protocol._read_topic_partitions as rows._tp_list gives it, each {"topic", "partitions"} a (topic,
   partitions) tuple; 1 = *out, 0 = refused, -1 = error */
static int rd_topic_partitions(Rd *r, PyObject **out) {
    int32_t n;
    if (!rd_count(r, &n)) return 0;
    PyObject *list = PyList_New(n);
    if (list == NULL) return -1;
    for (int32_t i = 0; i < n; i++) {
        PyObject *topic = NULL;
        int32_t m;
        int ok = rd_str(r, 0, &topic);
        if (ok <= 0 || !rd_count(r, &m) || m > (r->end - r->pos) / 4) {
            Py_XDECREF(topic);
            Py_DECREF(list);
            return ok < 0 ? -1 : 0;
        }
        PyObject *parts = PyList_New(m);
        PyObject *tp = parts ? PyTuple_New(2) : NULL;
        if (tp == NULL) goto fail_item;
        for (int32_t j = 0; j < m; j++) {
            PyObject *p = PyLong_FromLong(be32(r->b + r->pos));
            if (p == NULL) goto fail_item;
            PyList_SET_ITEM(parts, j, p);
            r->pos += 4;
        }
        PyTuple_SET_ITEM(tp, 0, topic);  /* both stolen */
        PyTuple_SET_ITEM(tp, 1, parts);
        PyList_SET_ITEM(list, i, tp);
        continue;
    fail_item:
        Py_XDECREF(topic);
        Py_XDECREF(parts);
        Py_XDECREF(tp);
        Py_DECREF(list);
        return -1;
    }
    *out = list;
    return 1;
}

/* field k of member tuple d (new, not yet shared) set to v, in place of what it held */
static inline int set_key(PyObject *d, int k, PyObject *v /* stolen */) {
    if (v == NULL) return -1;
    PyObject *old = PyTuple_GET_ITEM(d, k);
    PyTuple_SET_ITEM(d, k, v);
    Py_DECREF(old);
    return 0;
}

/* the end of a consumer-protocol message whose list (stolen) is read: its UserData passed, then its version and the
   list set in member tuple d. 1 = set, 0 = the UserData cannot be read (the reference gives None), -1 = error */
static int put_message(Rd *r, PyObject *d, int version_key, int version, int list_key, PyObject *list) {
    Py_ssize_t us, ul;
    if (!rd_bytes(r, &us, &ul)) {
        Py_DECREF(list);
        return 0;
    }
    if (set_key(d, version_key, PyLong_FromLong(version)) < 0) {
        Py_DECREF(list);
        return -1;
    }
    return set_key(d, list_key, list) < 0 ? -1 : 1;
}

/* consumer_protocol.read_subscription of b[s:s+n] into member tuple d (its fields None when the reference gives
   None); 0 / -1 = error */
static int put_subscription(PyObject *d, const unsigned char *b, Py_ssize_t s, Py_ssize_t n) {
    Rd r = {b, s, s + n};
    int version;
    int32_t count;
    /* a negative version is read as v0: the coordinators check none (consumer_protocol.read_subscription) */
    if (n == 0 || !rd_i16(&r, &version) || !rd_count(&r, &count)) return 0;
    PyObject *topics = PyList_New(count);
    if (topics == NULL) return -1;
    for (int32_t i = 0; i < count; i++) {
        PyObject *t = NULL;
        int ok = rd_str(&r, 0, &t);
        if (ok <= 0) {
            Py_DECREF(topics);
            return ok;
        }
        PyList_SET_ITEM(topics, i, t);
    }
    int ok;
    if ((ok = put_message(&r, d, M_SUB_VERSION, version, M_TOPICS, topics)) <= 0) return ok;
    /* what the claimed version adds, read as far as the bytes allow */
    PyObject *v = NULL;
    if (version >= 1) {
        if ((ok = rd_topic_partitions(&r, &v)) <= 0) return ok;
        if (set_key(d, M_OWNED, v) < 0) return -1;
    }
    if (version >= 2) {
        int32_t g;
        if (!rd_i32(&r, &g)) return 0;
        if (set_key(d, M_SUB_GENERATION, PyLong_FromLong(g)) < 0) return -1;
    }
    if (version >= 3) {
        if ((ok = rd_str(&r, 1, &v)) <= 0) return ok;
        if (set_key(d, M_RACK, v) < 0) return -1;
    }
    return 0;
}

/* consumer_protocol.read_assignment of b[s:s+n] into member tuple d; 0 / -1 = error */
static int put_assignment(PyObject *d, const unsigned char *b, Py_ssize_t s, Py_ssize_t n) {
    Rd r = {b, s, s + n};
    int version;
    PyObject *assigned = NULL;
    int ok;
    if (n == 0 || !rd_i16(&r, &version) || version < 0) return 0;
    if ((ok = rd_topic_partitions(&r, &assigned)) <= 0) return ok;
    return put_message(&r, d, M_ASG_VERSION, version, M_ASSIGNED, assigned) < 0 ? -1 : 0;
}

/* one MemberMetadata at version `version` as rows._member_dict makes it, its values in its keys' order (a tuple);
   1 = *out, 0 = refused, -1 = error */
static int rd_member(Rd *r, int version, int consumer, PyObject **out) {
    PyObject *d = PyTuple_New(M_NKEYS);
    if (d == NULL) return -1;
    for (int k = 0; k < M_NKEYS; k++)
        PyTuple_SET_ITEM(d, k, Py_NewRef(Py_None));
    PyObject *v;
    int ok;
    int32_t rebalance = -1, session;
    Py_ssize_t ss, sl, as, al;
#define STR(key, nullable) \
    if ((ok = rd_str(r, nullable, &v)) <= 0) goto stop; \
    if (set_key(d, key, v) < 0) goto error;
    STR(M_MEMBER_ID, 0)
    if (version >= 3) { STR(M_INSTANCE, 1) }
    STR(M_CLIENT_ID, 0)
    STR(M_CLIENT_HOST, 0)
#undef STR
    if (version >= 1 && !rd_i32(r, &rebalance)) { ok = 0; goto stop; }
    if (!rd_i32(r, &session)) { ok = 0; goto stop; }
    if (!rd_bytes(r, &ss, &sl) || sl < 0 || !rd_bytes(r, &as, &al) || al < 0) { ok = 0; goto stop; }
    if (set_key(d, M_REBALANCE, PyLong_FromLong(rebalance)) < 0
        || set_key(d, M_SESSION, PyLong_FromLong(session)) < 0
        || set_key(d, M_SUBSCRIPTION, PyBytes_FromStringAndSize((const char *)r->b + ss, sl)) < 0
        || set_key(d, M_ASSIGNMENT, PyBytes_FromStringAndSize((const char *)r->b + as, al)) < 0)
        goto error;
    if (consumer && (put_subscription(d, r->b, ss, sl) < 0 || put_assignment(d, r->b, as, al) < 0)) goto error;
    *out = d;
    return 1;
stop: /* ok: 0 refused, -1 an error */
    Py_DECREF(d);
    return ok;
error:
    Py_DECREF(d);
    return -1;
}

/* what a group record's row holds beside its key: its values (vals[0:n], owned, each taken and left NULL; None or
   NULL: no value) appended to their sparse lists in `glists` (row i), and its value version (-1: a tombstone's null)
   with the other hot value columns null into `h`. -1 = error */
static int put_group_row(Columns *h, PyObject *glists, Py_ssize_t i, PyObject **vals, int n, int version) {
    for (int j = 0; j < n; j++) {
        PyObject *v = vals[j];
        vals[j] = NULL;
        if (v == NULL) continue;
        if (v == Py_None) {
            Py_DECREF(v);
            continue;
        }
        if (append_pair(PyTuple_GET_ITEM(glists, j), i, v) < 0) return -1;  /* v stolen */
    }
    if (version >= 0) put_int(h, H_VER, version);
    else put_null(h, H_VER);
    for (int j = H_COMMITTED; j < H_NCOLS; j++) put_null(h, j);
    return 0;
}

/* the GroupMetadataValue at b[vs:ve] (v0-v3) into row i's group columns (`glists`: a list of (row, value) per
   G_ column, a value appended only when not None, as columnar._Chunk does) and the value version into `h`;
   1 = done, 0 = the Python path's record, -1 = error */
static int put_group_value(Columns *h, const unsigned char *b, Py_ssize_t vs, Py_ssize_t ve, PyObject *glists,
                           Py_ssize_t i) {
    Rd r = {b, vs, ve};
    int version, ok;
    int32_t generation, count;
    int64_t state_ts = -1;
    PyObject *vals[G_NCOLS] = {NULL};
    if (!rd_i16(&r, &version) || version < 0 || version > 3) return 0;
    if ((ok = rd_str(&r, 0, &vals[G_PROTOCOL_TYPE])) <= 0) return ok;
    Py_ssize_t tlen;
    const char *ptype = PyUnicode_AsUTF8AndSize(vals[G_PROTOCOL_TYPE], &tlen);
    if (ptype == NULL) goto error;
    int consumer = tlen == 8 && memcmp(ptype, "consumer", 8) == 0;
    if (!rd_i32(&r, &generation)) goto refused;
    if ((ok = rd_str(&r, 1, &vals[G_PROTOCOL])) <= 0 || (ok = rd_str(&r, 1, &vals[G_LEADER])) <= 0) goto done;
    if (version >= 2 && !rd_i64(&r, &state_ts)) goto refused;
    if (!rd_count(&r, &count)) goto refused;
    if ((vals[G_MEMBERS] = PyList_New(count)) == NULL) goto error;
    for (int32_t m = 0; m < count; m++) {
        PyObject *member;
        if ((ok = rd_member(&r, version, consumer, &member)) <= 0) goto done;
        PyList_SET_ITEM(vals[G_MEMBERS], m, member);
    }
    if (r.pos != ve) goto refused;
    if ((vals[G_GENERATION] = PyLong_FromLong(generation)) == NULL
        || (vals[G_STATE_TS] = PyLong_FromLongLong(state_ts)) == NULL)
        goto error;
    if (put_group_row(h, glists, i, vals, G_NCOLS, version) < 0) goto error;
    ok = 1;
    goto done;
refused:
    ok = 0;
    goto done;
error:
    ok = -1;
done:
    for (int j = 0; j < G_NCOLS; j++) Py_XDECREF(vals[j]);
    return ok;
}

/* A plain key, as columnar._parse_key accepts it: an OffsetCommitKey (type 0/1, int16 lengths < 0x8000, exact
 * length) or a GroupMetadataKey (type 2, its group's int16 length < 0x8000, exact length). */
typedef struct {
    int key_type;
    const unsigned char *group, *topic;   /* topic NULL: a GroupMetadataKey's */
    Py_ssize_t glen, tlen;
    int32_t partition;
} PlainKey;

/* k[0:n] read as a plain key: 1, or 0 when it is none (the Python path decides) */
static int read_plain_key(const unsigned char *k, Py_ssize_t n, PlainKey *out) {
    if (n >= 4 && k[0] == 0 && k[1] == 2) {
        Py_ssize_t glen = ((Py_ssize_t)k[2] << 8) | k[3];
        if (glen >= 0x8000 || 4 + glen != n) return 0;
        *out = (PlainKey){2, k + 4, NULL, glen, 0, 0};
        return 1;
    }
    if (n < 10 || k[0] != 0 || k[1] > 1) return 0;
    Py_ssize_t glen = ((Py_ssize_t)k[2] << 8) | k[3], p = 4 + glen;
    if (glen >= 0x8000 || p + 2 > n) return 0;
    Py_ssize_t tlen = ((Py_ssize_t)k[p] << 8) | k[p + 1], q = p + 2 + tlen;
    if (tlen >= 0x8000 || q + 4 != n) return 0;
    *out = (PlainKey){k[1], k + 4, k + p + 2, glen, tlen, be32(k + q)};
    return 1;
}

/* The key columns of row h->n (`columnar.KEY_COLUMNS`), read from the record's own key bytes: its record kind, its
 * key type (-1: null), group id and topic (NULL: null), each as str(b, "utf-8", "replace") decodes it, and its
 * partition (has_partition 0: null). Written last, once nothing can leave the record to the Python path (a column
 * a row began would outlive the rollback's count of its nulls). -1 = error */
static int put_key(Columns *h, const Label *kind, int key_type, const unsigned char *group, Py_ssize_t glen,
                   const unsigned char *topic, Py_ssize_t tlen, int has_partition, int32_t partition) {
    if (put_bytes(h, H_KIND, kind->s, kind->n) < 0) return -1;
    if (key_type >= 0) put_int(h, H_KTYPE, key_type);
    else put_null(h, H_KTYPE);
    if (group == NULL) put_null(h, H_GROUP);
    else if (put_utf8_replace(h, H_GROUP, group, glen) < 0) return -1;
    if (topic == NULL) put_null(h, H_TOPIC);
    else if (put_utf8_replace(h, H_TOPIC, topic, tlen) < 0) return -1;
    if (has_partition) put_int(h, H_PART, partition);
    else put_null(h, H_PART);
    return 0;
}

static int put_plain_key(Columns *h, const PlainKey *k) {
    return k->topic == NULL ? put_key(h, &GroupMetadataKind, 2, k->group, k->glen, NULL, 0, 0, 0)
                            : put_key(h, &OffsetCommitKind, k->key_type, k->group, k->glen, k->topic, k->tlen, 1,
                                      k->partition);
}

/* ------------------------------------------------------------------------------ KIP-848 consumer-group records
 * Key types 3-8 and 16 with a v0 value in the 3.8+ layout (`messages.GROUP_RECORD_SCHEMAS`' first), read as the
 * reference reads them (messages.read_message_key, read_group_record_value, then rows._fill_group_record) into
 * the row's group columns. The reference tries the 3.6/3.7 layouts after it: a value this layout does not read
 * whole, or any other doubt, leaves the record to the Python path, which decides and says why. */
enum { C_MEMBER_ID = G_NCOLS, C_REGEX, C_LAYOUT, C_GROUP_EPOCH, C_METADATA_HASH, C_TOPICS_METADATA, C_INSTANCE_ID,
       C_RACK_ID, C_CLIENT_ID, C_CLIENT_HOST, C_SUBSCRIBED_TOPICS, C_SUBSCRIBED_REGEX, C_REBALANCE,
       C_SERVER_ASSIGNOR, C_SESSION, C_ASSIGNMENT_EPOCH, C_ASSIGNED, C_MEMBER_EPOCH, C_PREVIOUS_EPOCH,
       C_MEMBER_STATE, C_PENDING_REVOCATION, C_REGEX_TOPICS, C_REGEX_VERSION, C_REGEX_TIMESTAMP, GL_NCOLS };
enum { T_TOPIC_ID, T_PARTITIONS, T_TOPIC_NAME, T_NUM_PARTITIONS, T_NKEYS };
static const char *TopicKeyNames[T_NKEYS] = {"topic_id", "partitions", "topic_name", "num_partitions"};
static PyObject *TopicKeys[T_NKEYS];
static PyObject *Layout38 = NULL; /* "3.8+": the layout these records are read in */

/* primitives.read_uvarint: at most 5 bytes; 1 = read, 0 = refused */
static int rd_uvarint(Rd *r, int64_t *out) {
    int64_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (r->pos >= r->end) return 0;
        unsigned c = r->b[r->pos++];
        v |= (int64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

static inline int rd_i8(Rd *r, int *out) {
    if (r->end - r->pos < 1) return 0;
    *out = (signed char)r->b[r->pos++];
    return 1;
}

/* primitives.read_compact_(nullable_)string: 1 = *out a new str (or None), 0 = refused, -1 = error */
static int rd_cstr(Rd *r, int nullable, PyObject **out) {
    int64_t n;
    if (!rd_uvarint(r, &n)) return 0;
    if (n == 0) {
        if (!nullable) return 0;
        *out = Py_NewRef(Py_None);
        return 1;
    }
    if (n - 1 > r->end - r->pos) return 0;
    *out = PyUnicode_DecodeUTF8((const char *)r->b + r->pos, (Py_ssize_t)(n - 1), "replace");
    if (*out == NULL) return -1;
    r->pos += (Py_ssize_t)(n - 1);
    return 1;
}

/* a non-null compact string or bytes, passed unread (what the reference reads and the row does not keep): 1 = passed,
   0 = refused */
static int rd_cpass(Rd *r) {
    int64_t n;
    if (!rd_uvarint(r, &n) || n == 0 || n - 1 > r->end - r->pos) return 0;
    r->pos += (Py_ssize_t)(n - 1);
    return 1;
}

/* primitives.read_compact_array_count of a non-nullable array: 1 = *n, 0 = refused */
static int rd_carray(Rd *r, int32_t *n) {
    int64_t c;
    if (!rd_uvarint(r, &c) || c == 0 || c - 1 > r->end - r->pos) return 0;
    *n = (int32_t)(c - 1);
    return 1;
}

/* a struct's tagged-field section (primitives.read_tagged_fields: tags ascending, each payload within the bytes);
   the payload of tag `known` at *ts, *tl (*tl -1: absent; known -1: none read). 1 = read, 0 = refused */
static int rd_tags(Rd *r, int known, Py_ssize_t *ts, int64_t *tl) {
    int64_t count, prev = -1;
    *tl = -1;
    if (!rd_uvarint(r, &count)) return 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t tag, size;
        if (!rd_uvarint(r, &tag) || tag <= prev || !rd_uvarint(r, &size) || size > r->end - r->pos) return 0;
        prev = tag;
        if (tag == known) {
            *ts = r->pos;
            *tl = size;
        }
        r->pos += (Py_ssize_t)size;
    }
    return 1;
}

static inline int rd_no_tags(Rd *r) {
    Py_ssize_t ts;
    int64_t tl;
    return rd_tags(r, -1, &ts, &tl);
}

/* a compact array of compact strings (non-null); 1 = *out, 0 = refused, -1 = error */
static int rd_cstrings(Rd *r, PyObject **out) {
    int32_t n;
    if (!rd_carray(r, &n)) return 0;
    PyObject *list = PyList_New(n);
    if (list == NULL) return -1;
    for (int32_t i = 0; i < n; i++) {
        PyObject *s;
        int ok = rd_cstr(r, 0, &s);
        if (ok <= 0) {
            Py_DECREF(list);
            return ok;
        }
        PyList_SET_ITEM(list, i, s);
    }
    *out = list;
    return 1;
}

/* a compact array of int32 (non-null) */
static int rd_cint32s(Rd *r, PyObject **out) {
    int32_t n;
    if (!rd_carray(r, &n) || n > (r->end - r->pos) / 4) return 0;
    PyObject *list = PyList_New(n);
    if (list == NULL) return -1;
    for (int32_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong(be32(r->b + r->pos));
        if (v == NULL) {
            Py_DECREF(list);
            return -1;
        }
        PyList_SET_ITEM(list, i, v);
        r->pos += 4;
    }
    *out = list;
    return 1;
}

static int rd_uuid(Rd *r, PyObject **out) {
    if (r->end - r->pos < 16) return 0;
    char s[22];
    uuid_str(r->b + r->pos, s);
    r->pos += 16;
    return (*out = PyUnicode_FromStringAndSize(s, 22)) == NULL ? -1 : 1;
}

/* d[TopicKeys[k]] = v (stolen); -1 = error */
static inline int set_topic_key(PyObject *d, int k, PyObject *v) {
    if (v == NULL) return -1;
    int r = PyDict_SetItem(d, TopicKeys[k], v);
    Py_DECREF(v);
    return r;
}

/* an array of topics, each a dict keyed by its topic id: TopicPartitions (topicId, partitions[], tags) as
   rows._tid_parts gives them, [{"topic_id", "partitions"}], or (`metadata`) ConsumerGroupPartitionMetadataValue's
   TopicMetadata as rows._fill_group_record keeps them, [{"topic_id", "topic_name", "num_partitions"}] (each
   partition's racks read and passed). 1 = *out, 0 = refused, -1 = error */
static int rd_topics(Rd *r, int metadata, PyObject **out) {
    int32_t n;
    if (!rd_carray(r, &n)) return 0;
    PyObject *list = PyList_New(n);
    if (list == NULL) return -1;
    for (int32_t i = 0; i < n; i++) {
        PyObject *d = PyDict_New(), *v;
        int ok = -1;
        if (d == NULL) goto stop;
        PyList_SET_ITEM(list, i, d);
        if ((ok = rd_uuid(r, &v)) <= 0) goto stop;
        if (set_topic_key(d, T_TOPIC_ID, v) < 0) { ok = -1; goto stop; }
        if (!metadata) {
            if ((ok = rd_cint32s(r, &v)) <= 0) goto stop;
            if (set_topic_key(d, T_PARTITIONS, v) < 0) { ok = -1; goto stop; }
        } else {
            int32_t num, parts, partition;
            if ((ok = rd_cstr(r, 0, &v)) <= 0) goto stop;
            if (set_topic_key(d, T_TOPIC_NAME, v) < 0) { ok = -1; goto stop; }
            ok = 0;
            if (!rd_i32(r, &num)) goto stop;
            if (set_topic_key(d, T_NUM_PARTITIONS, PyLong_FromLong(num)) < 0) { ok = -1; goto stop; }
            if (!rd_carray(r, &parts)) goto stop;
            for (int32_t p = 0; p < parts; p++) {
                int32_t racks;
                if (!rd_i32(r, &partition) || !rd_carray(r, &racks)) goto stop;
                for (int32_t k = 0; k < racks; k++)
                    if (!rd_cpass(r)) goto stop;  /* a rack name */
                if (!rd_no_tags(r)) goto stop;
            }
        }
        if (!rd_no_tags(r)) { ok = 0; goto stop; }
        continue;
    stop:
        Py_DECREF(list);
        return ok;
    }
    *out = list;
    return 1;
}

/* ConsumerGroupMemberMetadataValue's ClassicMemberMetadata tag (b[s:s+n], written even when null): its
   sessionTimeoutMs, or None; its supportedProtocols read and passed. 1 = *out, 0 = refused, -1 = error */
static int rd_classic_member(const unsigned char *b, Py_ssize_t s, Py_ssize_t n, PyObject **out) {
    Rd r = {b, s, s + n};
    int64_t marker;
    int32_t session, count;
    if (!rd_uvarint(&r, &marker) || (marker != 0 && marker != 1)) return 0;
    if (marker == 0) {
        if (r.pos != r.end) return 0;
        *out = Py_NewRef(Py_None);
        return 1;
    }
    if (!rd_i32(&r, &session) || !rd_carray(&r, &count)) return 0;
    for (int32_t i = 0; i < count; i++)  /* each protocol's name and metadata */
        if (!rd_cpass(&r) || !rd_cpass(&r) || !rd_no_tags(&r)) return 0;
    if (!rd_no_tags(&r) || r.pos != r.end) return 0;
    return (*out = PyLong_FromLong(session)) == NULL ? -1 : 1;
}

/* the value (3.8+ layout) of key type `kt` at b[vs:ve] into vals (the C_ columns; None or NULL: no value).
   1 = read, 0 = the Python path's, -1 = error */
static int rd_consumer_group_value(int kt, const unsigned char *b, Py_ssize_t vs, Py_ssize_t ve, PyObject **vals) {
    Rd r = {b, vs, ve};
    int version, ok, state;
    int32_t i32a, i32b;
    int64_t i64a, i64b, tl;
    Py_ssize_t ts;
    if (!rd_i16(&r, &version) || version != 0) return 0;
#define READ(expr) if ((ok = (expr)) <= 0) return ok;
#define LONG(col, v) if ((vals[col] = PyLong_FromLongLong(v)) == NULL) return -1;
    switch (kt) {
    case 3:
        if (!rd_i32(&r, &i32a) || !rd_tags(&r, 0, &ts, &tl)) return 0;
        if (tl >= 0) {  /* MetadataHash, an int64 payload */
            if (tl != 8) return 0;
            i64a = be64(b + ts);
        } else {
            i64a = 0;
        }
        LONG(C_GROUP_EPOCH, i32a)
        LONG(C_METADATA_HASH, i64a)
        break;
    case 4:
        READ(rd_topics(&r, 1, &vals[C_TOPICS_METADATA]))
        if (!rd_no_tags(&r)) return 0;
        break;
    case 5:
        READ(rd_cstr(&r, 1, &vals[C_INSTANCE_ID]))
        READ(rd_cstr(&r, 1, &vals[C_RACK_ID]))
        READ(rd_cstr(&r, 0, &vals[C_CLIENT_ID]))
        READ(rd_cstr(&r, 0, &vals[C_CLIENT_HOST]))
        READ(rd_cstrings(&r, &vals[C_SUBSCRIBED_TOPICS]))
        READ(rd_cstr(&r, 1, &vals[C_SUBSCRIBED_REGEX]))
        if (!rd_i32(&r, &i32a)) return 0;
        LONG(C_REBALANCE, i32a)
        READ(rd_cstr(&r, 1, &vals[C_SERVER_ASSIGNOR]))
        if (!rd_tags(&r, 0, &ts, &tl)) return 0;
        if (tl >= 0) READ(rd_classic_member(b, ts, (Py_ssize_t)tl, &vals[C_SESSION]))
        break;
    case 6:
        if (!rd_i32(&r, &i32a) || !rd_no_tags(&r)) return 0;
        LONG(C_ASSIGNMENT_EPOCH, i32a)
        break;
    case 7:
        READ(rd_topics(&r, 0, &vals[C_ASSIGNED]))
        if (!rd_no_tags(&r)) return 0;
        break;
    case 8:
        if (!rd_i32(&r, &i32a) || !rd_i32(&r, &i32b) || !rd_i8(&r, &state)) return 0;
        LONG(C_MEMBER_EPOCH, i32a)
        LONG(C_PREVIOUS_EPOCH, i32b)
        LONG(C_MEMBER_STATE, state)
        READ(rd_topics(&r, 0, &vals[C_ASSIGNED]))
        READ(rd_topics(&r, 0, &vals[C_PENDING_REVOCATION]))
        if (!rd_no_tags(&r)) return 0;
        break;
    case 16:
        READ(rd_cstrings(&r, &vals[C_REGEX_TOPICS]))
        if (!rd_i64(&r, &i64a) || !rd_i64(&r, &i64b) || !rd_no_tags(&r)) return 0;
        LONG(C_REGEX_VERSION, i64a)
        LONG(C_REGEX_TIMESTAMP, i64b)
        break;
    default:
        return 0;
    }
#undef READ
#undef LONG
    if (r.pos != ve) return 0;
    vals[C_LAYOUT] = Py_NewRef(Layout38);
    return 1;
}

static inline int is_consumer_group_key_type(int kt) { return (kt >= 3 && kt <= 8) || kt == 16; }

/* a consumer-group record (key type 3-8 or 16: the caller checked): its key (messages.read_message_key: type,
   group id, and for types 5, 7, 8 a member id, for 16 a regular expression, int16 lengths, exact length) and its
   value (vlen -1: a tombstone) into row i: its key columns and its group columns. 1 = done, 0 = the Python
   path's, -1 = error */
static int put_consumer_group_record(Columns *h, const unsigned char *b, Py_ssize_t ks, Py_ssize_t klen,
                                     Py_ssize_t vs, Py_ssize_t vlen, PyObject *glists, Py_ssize_t i) {
    const unsigned char *k = b + ks;
    int kt = be16(k);
    Rd r = {k, 2, klen};
    int glen, slen = -1;
    Py_ssize_t second = 0;
    if (!rd_i16(&r, &glen) || glen < 0 || glen > r.end - r.pos) return 0;
    r.pos += glen;
    if (kt == 5 || kt == 7 || kt == 8 || kt == 16) {
        if (!rd_i16(&r, &slen) || slen < 0 || slen > r.end - r.pos) return 0;
        second = r.pos;
        r.pos += slen;
    }
    if (r.pos != klen) return 0;
    PyObject *vals[GL_NCOLS] = {NULL};
    int ok = -1;
    if (vlen >= 0 && (ok = rd_consumer_group_value(kt, b, vs, vs + vlen, vals)) <= 0) goto done;
    ok = -1;
    if (slen >= 0 && (vals[kt == 16 ? C_REGEX : C_MEMBER_ID] =
                      PyUnicode_DecodeUTF8((const char *)k + second, slen, "replace")) == NULL)
        goto done;
    if (put_group_row(h, glists, i, vals, GL_NCOLS, vlen >= 0 ? 0 : -1) < 0) goto done;
    put_bool(h, H_TOMB, vlen < 0);
    if (put_key(h, &ConsumerGroupKind, kt, k + 4, glen, NULL, 0, 0, 0) < 0) goto done;
    ok = 1;
done:
    for (int j = 0; j < GL_NCOLS; j++) Py_XDECREF(vals[j]);
    return ok;
}

static int append_pair(PyObject *list, Py_ssize_t i, PyObject *v /* stolen */) {
    if (v == NULL) return -1;
    PyObject *t = Py_BuildValue("(nN)", i, v);
    if (t == NULL) return -1;
    int r = PyList_Append(list, t);
    Py_DECREF(t);
    return r;
}

static int put_label(Columns *c, int j, PyObject *labels, Py_ssize_t i) {
    PyObject *s = PyTuple_GET_ITEM(labels, i);
    return put_bytes(c, j, PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s));
}

#define LEAVE 0   /* the Python path takes this batch */
#define ERROR -1

/*
 * The records of one v2 batch, b[pos:end], into `hot` (rows from hot->n on). 1 = done, LEAVE, ERROR.
 * *first: the first record's offset (has_first = 0: no records).
 */
static int walk_records(const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, int32_t count, int64_t base_offset,
                        int64_t ts_base, int64_t ts_scale, int is_control, Columns *h, PyObject *ctl_types,
                        PyObject *ctl_epochs, PyObject *glists, int *has_first, int64_t *first) {
    for (int32_t r = 0; r < count; r++) {
        int64_t length, tsd, offd, klen, vlen;
        if (pos >= end) return LEAVE;
        if (read_varint(b, &pos, end, 5, &length) < 0 || length < 0) return LEAVE;
        if (length > end - pos) return LEAVE;
        Py_ssize_t rec_end = pos + (Py_ssize_t)length;
        pos += 1; /* attributes */
        if (read_varint(b, &pos, end, 10, &tsd) < 0) return LEAVE;
        if (read_varint(b, &pos, end, 5, &offd) < 0) return LEAVE;
        if (read_varint(b, &pos, end, 5, &klen) < 0) return LEAVE;
        Py_ssize_t ks = pos;
        if (klen >= 0) {
            if (klen > end - pos) return LEAVE;
            pos += (Py_ssize_t)klen;
        }
        if (read_varint(b, &pos, end, 5, &vlen) < 0) return LEAVE;
        Py_ssize_t vs = pos;
        if (vlen >= 0) {
            if (vlen > end - pos) return LEAVE;
            pos += (Py_ssize_t)vlen;
        }
        if (pos >= end || b[pos] != 0) return LEAVE; /* record headers */
        pos += 1;
        if (pos != rec_end) return LEAVE;
        Py_ssize_t ve = pos - 1;
        int64_t offset = long_add(base_offset, offd);
        int64_t ts = ts_scale ? long_add(ts_base, tsd) : ts_base;
        if (cols_reserve(h, h->n) < 0) return ERROR;
        Py_ssize_t i = h->n;
        if (is_control) {
            if (klen < 4 || b[ks] >= 0x80) return LEAVE;
            int ctype = be16(b + ks + 2);
            long epoch = -1;
            if (ctype == 0 || ctype == 1) {
                if (!(vlen >= 6 && b[vs] < 0x80)) return LEAVE;
                epoch = be32(b + vs + 2);
            }
            PyObject *ct = PyLong_FromLong(ctype);
            if (ct == NULL) return ERROR;
            PyObject *name = PyDict_GetItemWithError(ControlNames, ct);
            Py_DECREF(ct);
            if (name != NULL) Py_INCREF(name);
            else if (PyErr_Occurred()) return ERROR;
            else name = PyUnicode_FromFormat("UNKNOWN(%d)", ctype);
            if (append_pair(ctl_types, i, name) < 0) return ERROR;
            if ((ctype == 0 || ctype == 1) && append_pair(ctl_epochs, i, PyLong_FromLong(epoch)) < 0) return ERROR;
            put_bool(h, H_TOMB, vlen < 0);
            for (int j = H_VER; j < H_NCOLS; j++) put_null(h, j);
            if (put_key(h, &ControlKind, -1, NULL, 0, NULL, 0, 0, 0) < 0) return ERROR;
        } else {
            if (klen < 0) return LEAVE;
            if (klen >= 2 && b[ks] == 0 && is_consumer_group_key_type(b[ks + 1])) {
                int done = put_consumer_group_record(h, b, ks, (Py_ssize_t)klen, vs, (Py_ssize_t)vlen, glists, i);
                if (done < 0) return ERROR;
                if (done == 0) return LEAVE;
                goto placed;
            }
            PlainKey key;
            if (!read_plain_key(b + ks, (Py_ssize_t)klen, &key)) return LEAVE;
            if (vlen < 0) {
                for (int j = H_VER; j < H_NCOLS; j++) put_null(h, j);
                put_bool(h, H_TOMB, 1);
            } else if (key.topic == NULL) {  /* a GroupMetadataKey */
                int done = put_group_value(h, b, vs, ve, glists, i);
                if (done < 0) return ERROR;
                if (done == 0) return LEAVE;
                put_bool(h, H_TOMB, 0);
            } else {
                int done = put_value(h, b, vs, ve);
                if (done < 0) return ERROR;
                if (done == 0) return LEAVE;
                put_bool(h, H_TOMB, 0);
            }
            if (put_plain_key(h, &key) < 0) return ERROR;
        }
    placed:
        put_int(h, H_OFFSET, offset);
        put_int(h, H_TS, ts);
        h->n++;
        if (!*has_first) {
            *has_first = 1;
            *first = offset;
        }
    }
    return pos == end ? 1 : LEAVE;
}

static PyObject *decode_entries(PyObject *self, PyObject *args) {
    PyObject *bufobj, *ctl_types, *ctl_epochs, *glists, *decompress;
    Columns *h, *bc;
    Py_ssize_t pos, end, max_rows, max_bytes;
    int part;
    NativeOut section = {0};   /* this call's own: a callback may let another thread decode meanwhile */
    if (!PyArg_ParseTuple(args, "OnnnO!O!O!O!O!Oni", &bufobj, &pos, &end, &max_rows, &ColumnsType, &h,
                          &ColumnsType, &bc, &PyList_Type, &ctl_types, &PyList_Type, &ctl_epochs, &PyTuple_Type,
                          &glists, &decompress, &max_bytes, &part))
        return NULL;
    if (max_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "decode_entries: max_bytes < 0");
        return NULL;
    }
    if (h->ncols != H_NCOLS || bc->ncols != B_NCOLS || h->n != bc->n) {
        PyErr_SetString(PyExc_ValueError, "decode_entries: wrong column sets");
        return NULL;
    }
    if (PyTuple_GET_SIZE(glists) != GL_NCOLS) goto notlists;
    for (int j = 0; j < GL_NCOLS; j++)
        if (!PyList_Check(PyTuple_GET_ITEM(glists, j))) goto notlists;
    Py_buffer view;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *m = (const unsigned char *)view.buf;
    if (end > view.len || pos < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "decode_entries: bad bounds");
        return NULL;
    }
    while (h->n < max_rows) {
        Py_ssize_t total = frame_entry(m, pos, end);
        if (total == 0) break;                                    /* the walk's stop: the Python path reports it */
        const unsigned char *e = m + pos;
        if (e[16] != 2 || total < 61) break;                      /* legacy, or shorter than a v2 header */
        int64_t base_offset = be64(e);
        uint32_t crc = (uint32_t)be32(e + 17);
        int attributes = be16(e + 21);
        int32_t last_delta = be32(e + 23);
        int64_t base_ts = be64(e + 27), max_ts = be64(e + 35), producer_id = be64(e + 43);
        int producer_epoch = be16(e + 51);
        int32_t count = be32(e + 57);
        if (count < 0 || crc32c(e + 21, total - 21) != crc) break;
        int codec = attributes & 7, log_append = (attributes & 8) != 0, is_control = (attributes & 0x20) != 0;
        Py_ssize_t n0 = h->n, c0 = PyList_GET_SIZE(ctl_types), q0 = PyList_GET_SIZE(ctl_epochs), g0[GL_NCOLS];
        for (int j = 0; j < GL_NCOLS; j++) g0[j] = PyList_GET_SIZE(PyTuple_GET_ITEM(glists, j));
        int has_first = 0, r;
        int64_t first = 0;
        if (codec == 0) {
            r = walk_records(e, 61, total, count, base_offset, log_append ? max_ts : base_ts, log_append ? 0 : 1,
                             is_control, h, ctl_types, ctl_epochs, glists, &has_first, &first);
        } else if (native_decompress(codec, e + 61, (size_t)(total - 61), (size_t)max_bytes, &section)) {
            r = walk_records(section.buf, 0, (Py_ssize_t)section.len, count, base_offset,
                             log_append ? max_ts : base_ts, log_append ? 0 : 1, is_control, h, ctl_types,
                             ctl_epochs, glists, &has_first, &first);
        } else {
            PyObject *packed = PyBytes_FromStringAndSize((const char *)e + 61, total - 61);
            PyObject *raw = packed ? PyObject_CallFunction(decompress, "iN", codec, packed) : NULL;
            if (raw == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_Exception)) goto fail;
                PyErr_Clear();   /* the Python path reports it */
                break;
            }
            Py_buffer rv;
            if (PyObject_GetBuffer(raw, &rv, PyBUF_SIMPLE) < 0) { Py_DECREF(raw); goto fail; }
            r = walk_records((const unsigned char *)rv.buf, 0, rv.len, count, base_offset,
                             log_append ? max_ts : base_ts, log_append ? 0 : 1, is_control, h, ctl_types,
                             ctl_epochs, glists, &has_first, &first);
            PyBuffer_Release(&rv);
            Py_DECREF(raw);
        }
        if (r != 1) {
            cols_truncate(h, n0);
            if (PyList_GET_SIZE(ctl_types) > c0) PyList_SetSlice(ctl_types, c0, PyList_GET_SIZE(ctl_types), NULL);
            if (PyList_GET_SIZE(ctl_epochs) > q0) PyList_SetSlice(ctl_epochs, q0, PyList_GET_SIZE(ctl_epochs), NULL);
            for (int j = 0; j < GL_NCOLS; j++) {
                PyObject *g = PyTuple_GET_ITEM(glists, j);
                if (PyList_GET_SIZE(g) > g0[j]) PyList_SetSlice(g, g0[j], PyList_GET_SIZE(g), NULL);
            }
            if (r == ERROR) goto fail;
            break;
        }
        for (Py_ssize_t i = n0; i < h->n; i++) {
            if (cols_reserve(bc, bc->n) < 0) goto fail;
            if (put_label(bc, B_TSTYPE, TsTypes, log_append) < 0) goto fail;
            if (put_label(bc, B_CODEC, CodecLabels, codec) < 0) goto fail;
            put_int(bc, B_PART, part);
            put_int(bc, B_BASE, base_offset);
            put_int(bc, B_FIRST, first);
            put_int(bc, B_LAST, long_add(base_offset, last_delta));
            put_int(bc, B_POS, pos);
            put_int(bc, B_PID, producer_id);
            put_int(bc, B_PEPOCH, producer_epoch);
            put_bool(bc, B_TXN, (attributes & 0x10) != 0);
            put_bool(bc, B_CONTROL, is_control);
            put_int(bc, B_MAGIC, 2);
            bc->n++;
        }
        pos += total;
    }
    PyBuffer_Release(&view);
    native_out_free(&section);
    return PyLong_FromSsize_t(pos);
fail:
    PyBuffer_Release(&view);
    native_out_free(&section);
    return NULL;
notlists:
    PyErr_SetString(PyExc_TypeError, "decode_entries: a tuple of one list per group column");
    return NULL;
}

static int set_label(Label *l, PyObject *s) {
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (u == NULL) return -1;
    Py_XSETREF(l->obj, Py_NewRef(s));
    l->s = u;
    l->n = n;
    return 0;
}

static PyObject *init(PyObject *self, PyObject *args) {
    PyObject *control_names, *ts_types, *codec_labels, *offset_commit_kind, *group_metadata_kind;
    PyObject *consumer_group_kind, *control_kind;
    if (!PyArg_ParseTuple(args, "O!O!O!UUUU", &PyDict_Type, &control_names, &PyTuple_Type, &ts_types, &PyTuple_Type,
                          &codec_labels, &offset_commit_kind, &group_metadata_kind, &consumer_group_kind,
                          &control_kind))
        return NULL;
    if (PyTuple_GET_SIZE(ts_types) != 2 || PyTuple_GET_SIZE(codec_labels) != 8) {
        PyErr_SetString(PyExc_ValueError, "init: 2 timestamp types and 8 codec labels");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < 2; i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(ts_types, i))) goto notbytes;
    for (Py_ssize_t i = 0; i < 8; i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(codec_labels, i))) goto notbytes;
    if (set_label(&OffsetCommitKind, offset_commit_kind) < 0 || set_label(&GroupMetadataKind, group_metadata_kind) < 0
        || set_label(&ConsumerGroupKind, consumer_group_kind) < 0 || set_label(&ControlKind, control_kind) < 0)
        return NULL;
    Py_XSETREF(ControlNames, Py_NewRef(control_names));
    Py_XSETREF(TsTypes, Py_NewRef(ts_types));
    Py_XSETREF(CodecLabels, Py_NewRef(codec_labels));
    Py_RETURN_NONE;
notbytes:
    PyErr_SetString(PyExc_TypeError, "init: labels are utf-8 bytes");
    return NULL;
}

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer v;
    int software = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &v, &software)) return NULL;
    uint32_t c = (software ? crc32c_sw : crc32c)((const unsigned char *)v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(c);
}

/* The arguments of a walk over a segment file's bytes, (buffer, start): the buffer held (the caller releases it)
   and the start, clamped at 0. 0 = an argument error is set. */
static int walk_args(PyObject *args, Py_buffer *v, Py_ssize_t *pos) {
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "y*n", v, &start)) return 0;
    *pos = start < 0 ? 0 : start;
    return 1;
}

/* entry_heads(buffer, start) -> (positions, last_offsets, records, end): the walk of `segments.entry_heads` (the
   Python reference, which says what each field is) over a whole segment file's bytes, from `start`: native int64
   arrays as bytes, one element per entry, and the position the walk stopped at. No Python object per entry: a hot
   partition's planning walks millions of them. */
static PyObject *entry_heads(PyObject *self, PyObject *args) {
    Py_buffer v;
    Py_ssize_t pos, count = 0, cap = 4096;
    if (!walk_args(args, &v, &pos)) return NULL;
    const unsigned char *m = (const unsigned char *)v.buf;
    Py_ssize_t n = v.len;
    int64_t *positions = PyMem_RawMalloc(cap * sizeof(int64_t)), *lasts = PyMem_RawMalloc(cap * sizeof(int64_t)),
            *records = PyMem_RawMalloc(cap * sizeof(int64_t));
    int failed = positions == NULL || lasts == NULL || records == NULL;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t total;
    while (!failed && (total = frame_entry(m, pos, n)) > 0) {
        int64_t offset = be64(m + pos);
        unsigned char magic = m[pos + 16];
        if (offset < 0 || magic > 2 || (magic == 2 && total < 27)) break;  /* 27: through lastOffsetDelta */
        int64_t last = magic == 2 ? long_add(offset, be32(m + pos + 23)) : offset;
        int64_t held = 1;
        if (magic == 2 && total >= 61) {  /* 61: the whole v2 header, through recordsCount */
            held = be32(m + pos + 57);
        } else if (magic < 2 && count > 0) {
            held = offset - lasts[count - 1];
        }
        if (held < 1) held = 1;
        if (count == cap) {
            cap *= 2;
            int64_t *p2 = PyMem_RawRealloc(positions, cap * sizeof(int64_t));
            if (p2 != NULL) positions = p2;
            int64_t *l2 = p2 == NULL ? NULL : PyMem_RawRealloc(lasts, cap * sizeof(int64_t));
            if (l2 != NULL) lasts = l2;
            int64_t *r2 = l2 == NULL ? NULL : PyMem_RawRealloc(records, cap * sizeof(int64_t));
            if (r2 != NULL) records = r2;
            if (p2 == NULL || l2 == NULL || r2 == NULL) { failed = 1; break; }
        }
        positions[count] = pos;
        lasts[count] = last;
        records[count] = held;
        count++;
        pos += total;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    PyObject *out = NULL;
    if (failed) {
        PyErr_NoMemory();
    } else {
        Py_ssize_t bytes = count * (Py_ssize_t)sizeof(int64_t);
        out = Py_BuildValue("(y#y#y#n)", (const char *)positions, bytes, (const char *)lasts, bytes,
                            (const char *)records, bytes, pos);
    }
    PyMem_RawFree(positions);
    PyMem_RawFree(lasts);
    PyMem_RawFree(records);
    return out;
}

/* count_entries(buffer, start) -> (records, others, end, last): the walk of `frames.decode.count_segment` (the
   Python reference, which says what is counted) over a whole segment file's bytes, from `start`, for its magic 2
   batches: `records` is what the clean ones hold (recordsCount of a batch whose CRC-32C verifies); `others` the
   (position, size) of every other entry, as native int64 pairs in bytes, in order (legacy entries, which carry
   zlib's CRC-32, and batches that fail a check: the caller looks at each); `end` where the walk stopped; `last`
   (position, size, last offset) of the last entry framed, or None. No Python object per clean batch. */
static PyObject *count_entries(PyObject *self, PyObject *args) {
    Py_buffer v;
    Py_ssize_t pos, count = 0, cap = 256;
    if (!walk_args(args, &v, &pos)) return NULL;
    const unsigned char *m = (const unsigned char *)v.buf;
    Py_ssize_t n = v.len;
    int64_t records = 0, last_pos = -1, last_total = 0, last_offset = 0;
    int64_t *others = PyMem_RawMalloc(cap * 2 * sizeof(int64_t));
    int failed = others == NULL;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t total;
    while (!failed && (total = frame_entry(m, pos, n)) > 0) {
        int64_t offset = be64(m + pos);
        unsigned char magic = m[pos + 16];
        last_pos = pos;
        last_total = total;
        last_offset = magic == 2 && total >= 27 ? long_add(offset, be32(m + pos + 23)) : offset;
        int clean = 0;
        if (magic == 2 && total >= 61) {  /* RECORD_BATCH_OVERHEAD: the whole v2 header */
            int32_t held = be32(m + pos + 57);
            if (held >= 0 && crc32c(m + pos + 21, (size_t)(total - 21)) == (uint32_t)be32(m + pos + 17)) {
                records += held;
                clean = 1;
            }
        }
        if (!clean) {
            if (count == cap) {
                cap *= 2;
                int64_t *o2 = PyMem_RawRealloc(others, cap * 2 * sizeof(int64_t));
                if (o2 == NULL) { failed = 1; break; }
                others = o2;
            }
            others[2 * count] = pos;
            others[2 * count + 1] = total;
            count++;
        }
        pos += total;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    Py_ssize_t others_bytes = count * 2 * (Py_ssize_t)sizeof(int64_t);
    PyObject *out = failed ? NULL
        : last_pos < 0 ? Py_BuildValue("(Ly#nO)", (long long)records, (const char *)others, others_bytes, pos, Py_None)
        : Py_BuildValue("(Ly#n(LLL))", (long long)records, (const char *)others, others_bytes, pos,
                        (long long)last_pos, (long long)last_total, (long long)last_offset);
    PyMem_RawFree(others);
    return failed ? PyErr_NoMemory() : out;
}

static PyObject *py_native_codecs(PyObject *self, PyObject *noargs) {
    PyObject *out = PyList_New(0);
    for (int c = 0; out != NULL && c < 8; c++) {
        if (!native_codec_loaded(c)) continue;
        PyObject *v = PyLong_FromLong(c);
        if (v == NULL || PyList_Append(out, v) < 0) Py_CLEAR(out);
        Py_XDECREF(v);
    }
    return out;
}

static PyObject *py_decompress(PyObject *self, PyObject *args) {
    int codec;
    Py_buffer data;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "iy*n", &codec, &data, &max_bytes)) return NULL;
    NativeOut out = {0};
    int ok = max_bytes >= 0 && native_decompress(codec, data.buf, (size_t)data.len, (size_t)max_bytes, &out);
    PyBuffer_Release(&data);
    PyObject *r = ok ? PyBytes_FromStringAndSize((const char *)out.buf, (Py_ssize_t)out.len) : Py_NewRef(Py_None);
    native_out_free(&out);
    return r;
}

static PyMethodDef methods[] = {
    {"native_codecs", py_native_codecs, METH_NOARGS,
     "native_codecs() -> the codec ids (attributes & 7) decompressed in C on this machine."},
    {"decompress", py_decompress, METH_VARARGS,
     "decompress(codec, data, max_bytes) -> bytes, or None: left to codecs.decompress (see _native_codecs.c)."},
    {"decode_entries", decode_entries, METH_VARARGS, "Decode the clean magic 2 entries from pos (see columnar.py)."},
    {"init", init, METH_VARARGS,
     "init(key_id, control_entry, control_names, ts_types, codec_labels, offset_commit_kind, "
     "group_metadata_kind, consumer_group_kind)"},
    {"entry_heads", entry_heads, METH_VARARGS,
     "entry_heads(buffer, start) -> (positions, last_offsets, records, end): int64 arrays as bytes (see "
     "segments.py)."},
    {"count_entries", count_entries, METH_VARARGS,
     "count_entries(buffer, start) -> (records, others, end, last): clean magic 2 batches counted (see "
     "frames/decode.py's count_segment)."},
    {"python_rows", python_rows, METH_VARARGS,
     "python_rows(schema_capsule, array_capsule, rows, narrow, narrow_columns, skip, row_type) -> a dict per row "
     "(see _python_rows.c)."},
    {"crc32c", py_crc32c, METH_VARARGS,
     "crc32c(buffer, software=False): CRC-32C as the batch header stores it (the table code when software)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_fastdecode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastdecode(void) {
    crc_init();
    native_codecs_load();
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) crc32c = crc32c_hw;
#endif
    if (PyType_Ready(&ColumnsType) < 0 || PyType_Ready(&BufferType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    PyObject *fields = PyTuple_New(M_NKEYS);
    if (fields == NULL) goto error;
    for (int k = 0; k < M_NKEYS; k++) {
        PyObject *name = PyUnicode_InternFromString(MemberKeyNames[k]);
        if (name == NULL) {
            Py_DECREF(fields);
            goto error;
        }
        PyTuple_SET_ITEM(fields, k, name);
    }
    int added = PyModule_AddObjectRef(m, "MEMBER_FIELDS", fields);
    Py_DECREF(fields);
    if (added < 0) goto error;
    for (int k = 0; k < T_NKEYS; k++)
        if ((TopicKeys[k] = PyUnicode_InternFromString(TopicKeyNames[k])) == NULL) goto error;
    if ((Layout38 = PyUnicode_InternFromString("3.8+")) == NULL) goto error;
    /* 2: each row's key columns written from its record's own key bytes (an older build, which kept a key table,
       is not used: `native`) */
    if (PyModule_AddObjectRef(m, "Columns", (PyObject *)&ColumnsType) < 0
        || PyModule_AddIntConstant(m, "ROW_KEYS", 2) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
error:
    Py_DECREF(m);
    return NULL;
}
