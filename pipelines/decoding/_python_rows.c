/*
 * Decoded Arrow rows as the Python loaders read them (coordinator/decoded.py's group_rows), read straight from the
 * columns' buffers through the Arrow C data interface: the rows a window's loaders read are a few thousand among
 * tens of thousands, of a decoded table's ~60 columns, and pyarrow would take them out of every column and make
 * each column's values Python objects before a dict per row could be built of them.
 *
 * python_rows(schema_capsule, array_capsule, rows, narrow, narrow_columns, skip, row_type) -> list
 *   `schema_capsule`, `array_capsule`: a RecordBatch's `__arrow_c_array__()`; `rows`: int64 row numbers of the
 *   batch (bytes-like); `narrow`: a uint8 per row, 1 where the row reads only the columns `narrow_columns` (a
 *   uint8 per column) marks; `skip`: a set of struct field names left out of every struct (a classic member's raw
 *   bytes); `row_type`: called with no argument, the empty dict (a subclass of dict) each row is filled into.
 *   Each row holds its columns that are set, in the batch's column order, each value as pyarrow's `as_py` makes
 *   it: a struct a dict of every field it keeps (null fields as None), a list a list.
 */
#include "_python_rows.h"
#include <stdint.h>
#include <string.h>

/* The Arrow C data interface's structs (https://arrow.apache.org/docs/format/CDataInterface.html): an ABI. */
struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

enum {
    K_NULL, K_I8, K_U8, K_I16, K_U16, K_I32, K_U32, K_I64, K_U64, K_BOOL,
    K_STR, K_LSTR, K_BIN, K_LBIN, K_LIST, K_LLIST, K_STRUCT,
};

/* a field's type as read here, its name, and its children's (a list's one, a struct's each) */
typedef struct Node {
    int kind;
    int skip; /* a struct field left out */
    PyObject *name;
    int64_t n;
    struct Node *children;
    /* a string field's last value, given again while the next is the same (a group's id, a record's kind, a
       member's host: a window's rows repeat them, and each object made is memory first touched) */
    PyObject *last;
} Node;

static const struct {
    const char *format;
    int kind;
    int buffers;
} Formats[] = {
    {"n", K_NULL, 0}, {"c", K_I8, 2}, {"C", K_U8, 2}, {"s", K_I16, 2}, {"S", K_U16, 2}, {"i", K_I32, 2},
    {"I", K_U32, 2}, {"l", K_I64, 2}, {"L", K_U64, 2}, {"b", K_BOOL, 2}, {"u", K_STR, 3}, {"U", K_LSTR, 3},
    {"z", K_BIN, 3}, {"Z", K_LBIN, 3}, {"+l", K_LIST, 2}, {"+L", K_LLIST, 2}, {"+s", K_STRUCT, 1},
};

static void node_free(Node *nd) {
    for (int64_t k = 0; k < nd->n && nd->children != NULL; k++) node_free(&nd->children[k]);
    PyMem_Free(nd->children);
    Py_CLEAR(nd->name);
    Py_CLEAR(nd->last);
    nd->children = NULL;
    nd->n = 0;
}

static int node_init(Node *nd, const struct ArrowSchema *s, PyObject *skip) {
    memset(nd, 0, sizeof *nd);
    nd->kind = -1;
    for (size_t f = 0; f < sizeof Formats / sizeof Formats[0]; f++)
        if (strcmp(s->format, Formats[f].format) == 0) nd->kind = Formats[f].kind;
    if (nd->kind < 0 || s->dictionary != NULL) { /* a dictionary's format is its indices' */
        PyErr_Format(PyExc_TypeError, "python_rows: Arrow format '%s'%s is not read here", s->format,
                     s->dictionary != NULL ? " (dictionary-encoded)" : "");
        return -1;
    }
    if ((nd->name = PyUnicode_InternFromString(s->name != NULL ? s->name : "")) == NULL) return -1;
    if ((nd->skip = PySet_Contains(skip, nd->name)) < 0) return -1;
    if (nd->kind != K_LIST && nd->kind != K_LLIST && nd->kind != K_STRUCT) return 0;
    if ((nd->kind != K_STRUCT && s->n_children != 1) || s->n_children < 0) {
        PyErr_SetString(PyExc_ValueError, "python_rows: a list without one child");
        return -1;
    }
    if (s->n_children == 0) return 0;
    if ((nd->children = PyMem_Calloc((size_t)s->n_children, sizeof(Node))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    nd->n = s->n_children;
    for (int64_t k = 0; k < nd->n; k++)
        if (node_init(&nd->children[k], s->children[k], skip) < 0) return -1;
    return 0;
}

static int buffers_of(int kind) {
    for (size_t f = 0; f < sizeof Formats / sizeof Formats[0]; f++)
        if (Formats[f].kind == kind) return Formats[f].buffers;
    return 0;
}

/* 0: `a` is laid out as `nd` says (its buffers and children there); else an error is set */
static int array_ok(const Node *nd, const struct ArrowArray *a) {
    if (a->n_buffers < buffers_of(nd->kind) || a->n_children != nd->n || a->offset < 0 || a->length < 0) {
        PyErr_SetString(PyExc_ValueError, "python_rows: an array's buffers or children do not match its type");
        return -1;
    }
    for (int64_t k = 0; k < nd->n; k++)
        if (array_ok(&nd->children[k], a->children[k]) < 0) return -1;
    return 0;
}

static inline int bit(const void *bits, int64_t j) {
    return (((const uint8_t *)bits)[j >> 3] >> (j & 7)) & 1;
}

static PyObject *text(Node *nd, const char *data, int64_t start, int64_t end, int bytes) {
    Py_ssize_t n = (Py_ssize_t)(end - start);
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "python_rows: a value's offsets decrease");
        return NULL;
    }
    if (n == 0) return bytes ? PyBytes_FromStringAndSize("", 0) : PyUnicode_FromStringAndSize("", 0);
    if (bytes) return PyBytes_FromStringAndSize(data + start, n);
    PyObject *last = nd->last;
    if (last != NULL && PyUnicode_GET_LENGTH(last) == n && PyUnicode_IS_COMPACT_ASCII(last)
        && memcmp(PyUnicode_DATA(last), data + start, (size_t)n) == 0)
        return Py_NewRef(last);
    PyObject *v = PyUnicode_DecodeUTF8(data + start, n, NULL);
    if (v != NULL) Py_XSETREF(nd->last, Py_NewRef(v));
    return v;
}

/* The value at logical index `i` of `a` (its own offset applied here), a new reference. */
static PyObject *value(Node *nd, const struct ArrowArray *a, int64_t i) {
    int64_t j = i + a->offset;
    if (nd->kind == K_NULL || (a->null_count != 0 && a->buffers[0] != NULL && !bit(a->buffers[0], j)))
        Py_RETURN_NONE;
    const void *d = a->buffers[1];
    switch (nd->kind) {
    case K_I8: return PyLong_FromLong(((const int8_t *)d)[j]);
    case K_U8: return PyLong_FromUnsignedLong(((const uint8_t *)d)[j]);
    case K_I16: return PyLong_FromLong(((const int16_t *)d)[j]);
    case K_U16: return PyLong_FromUnsignedLong(((const uint16_t *)d)[j]);
    case K_I32: return PyLong_FromLong(((const int32_t *)d)[j]);
    case K_U32: return PyLong_FromUnsignedLong(((const uint32_t *)d)[j]);
    case K_I64: return PyLong_FromLongLong(((const int64_t *)d)[j]);
    case K_U64: return PyLong_FromUnsignedLongLong(((const uint64_t *)d)[j]);
    case K_BOOL: return PyBool_FromLong(bit(d, j));
    case K_STR: case K_BIN: {
        const int32_t *o = d;
        return text(nd, a->buffers[2], o[j], o[j + 1], nd->kind == K_BIN);
    }
    case K_LSTR: case K_LBIN: {
        const int64_t *o = d;
        return text(nd, a->buffers[2], o[j], o[j + 1], nd->kind == K_LBIN);
    }
    case K_LIST: case K_LLIST: {
        int64_t s = nd->kind == K_LIST ? ((const int32_t *)d)[j] : ((const int64_t *)d)[j];
        int64_t e = nd->kind == K_LIST ? ((const int32_t *)d)[j + 1] : ((const int64_t *)d)[j + 1];
        if (e < s || s < 0 || e > a->children[0]->length) {
            PyErr_SetString(PyExc_ValueError, "python_rows: a list's offsets are out of its values");
            return NULL;
        }
        PyObject *out = PyList_New((Py_ssize_t)(e - s));
        if (out == NULL) return NULL;
        for (int64_t k = s; k < e; k++) {
            PyObject *v = value(&nd->children[0], a->children[0], k);
            if (v == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            PyList_SET_ITEM(out, (Py_ssize_t)(k - s), v);
        }
        return out;
    }
    case K_STRUCT: {
        PyObject *out = PyDict_New();
        if (out == NULL) return NULL;
        for (int64_t k = 0; k < nd->n; k++) {
            Node *c = &nd->children[k];
            if (c->skip) continue;
            PyObject *v = value(c, a->children[k], j); /* a struct's offset is its children's too */
            if (v == NULL || PyDict_SetItem(out, c->name, v) < 0) {
                Py_XDECREF(v);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(v);
        }
        return out;
    }
    }
    PyErr_SetString(PyExc_SystemError, "python_rows: unknown kind");
    return NULL;
}

PyObject *python_rows(PyObject *self, PyObject *args) {
    PyObject *schema_capsule, *array_capsule, *skip, *row_type, *out = NULL;
    Py_buffer rows, narrow, narrow_columns;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOy*y*y*OO", &schema_capsule, &array_capsule, &rows, &narrow, &narrow_columns,
                          &skip, &row_type))
        return NULL;
    Node top = {0};
    const struct ArrowSchema *schema = PyCapsule_GetPointer(schema_capsule, "arrow_schema");
    const struct ArrowArray *array = schema == NULL ? NULL : PyCapsule_GetPointer(array_capsule, "arrow_array");
    if (array == NULL) goto done;
    if (!PyAnySet_Check(skip)) {
        PyErr_SetString(PyExc_TypeError, "python_rows: skip must be a set");
        goto done;
    }
    if (strcmp(schema->format, "+s") != 0) {
        PyErr_SetString(PyExc_TypeError, "python_rows: not a record batch (a struct array)");
        goto done;
    }
    Py_ssize_t n = rows.len / (Py_ssize_t)sizeof(int64_t);
    if (rows.len % (Py_ssize_t)sizeof(int64_t) != 0 || narrow.len != n || narrow_columns.len != schema->n_children) {
        PyErr_SetString(PyExc_ValueError, "python_rows: rows, narrow or narrow_columns of the wrong length");
        goto done;
    }
    if (node_init(&top, schema, skip) < 0 || array_ok(&top, array) < 0) goto done;
    const int64_t *at = rows.buf;
    const uint8_t *narrowed = narrow.buf, *kept = narrow_columns.buf;
    if ((out = PyList_New(n)) == NULL) goto done;
    for (Py_ssize_t r = 0; r < n; r++) {
        if (at[r] < 0 || at[r] >= array->length) {
            PyErr_SetString(PyExc_IndexError, "python_rows: a row number outside the batch");
            goto fail;
        }
        PyObject *row = PyObject_CallNoArgs(row_type);
        if (row == NULL) goto fail;
        PyList_SET_ITEM(out, r, row);
        if (!PyDict_Check(row)) {
            PyErr_SetString(PyExc_TypeError, "python_rows: row_type() must make a dict");
            goto fail;
        }
        for (int64_t c = 0; c < top.n; c++) {
            if (narrowed[r] && !kept[c]) continue;
            PyObject *v = value(&top.children[c], array->children[c], at[r] + array->offset);
            if (v == NULL) goto fail;
            int bad = v != Py_None && PyDict_SetItem(row, top.children[c].name, v) < 0;
            Py_DECREF(v);
            if (bad) goto fail;
        }
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    node_free(&top);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&narrow);
    PyBuffer_Release(&narrow_columns);
    return out;
}
