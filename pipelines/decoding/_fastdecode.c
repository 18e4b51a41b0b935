/*
 * Optional C walker for pipelines/decoding/columnar.py: the magic 2 record walk + OffsetCommit key/value decode.
 *
 * walk_v2(buf, pos, end, count, base_offset, ts_base, ts_scale, is_control, rows, kcache, ktable, gcache,
 *         ctl_types, ctl_epochs, pending) -> first offset | None
 *
 * Same contract as columnar._walk_v2 (the pure-Python reference): one 11-tuple per record appended to `rows`
 * (offset, timestamp, key-table index, is_tombstone, value_version, committed_offset, leader_epoch, metadata,
 * commit_timestamp, expire_timestamp, topic_id); a record it does not decode itself gets a None placeholder and
 * (row_index, offset_delta, timestamp, key, value) in `pending`; any batch-level oddity raises (the Bail class
 * given to init(), or any other exception) and the caller decodes the batch with the reference path.
 * Key-table misses and unusual values call back into the Python helpers given to init().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *Bail = NULL;          /* exception class */
static PyObject *KeyIdFn = NULL;       /* _key_id(key, kcache, ktable, gcache) -> int */
static PyObject *OtherValueFn = NULL;  /* _other_value(buf, vs, ve) -> tuple | None */
static PyObject *ControlEntry = NULL;  /* key-table entry of control records */
static PyObject *ControlNames = NULL;  /* dict int -> name */
static PyObject *ControlKey = NULL;    /* int 0: kcache slot of ControlEntry */
static PyObject *EmptyStr = NULL;

static int bail(const char *why) {
    PyErr_SetString(Bail ? Bail : PyExc_ValueError, why);
    return -1;
}

/* zig-zag varint, at most maxb bytes; -1 on error (exception set). */
static inline int read_varint(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, int maxb, int64_t *out) {
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos, start = p;
    for (;;) {
        if (p >= end) return bail("varint runs past the end");
        unsigned char c = b[p++];
        if (shift == 63 && (c & 0x7F) > 1) return bail("varint beyond 64 bits");
        raw |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80) break;
        shift += 7;
        if (p - start >= maxb) return bail("varint too long");
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

/* Append tuple; steals the references of the items (NULL item = error, already set). */
static int append_row(PyObject *rows, PyObject *items[11]) {
    PyObject *t = PyTuple_New(11);
    int ok = t != NULL;
    for (int i = 0; i < 11; i++) {
        if (items[i] == NULL) ok = 0;
    }
    if (!ok) {
        for (int i = 0; i < 11; i++) Py_XDECREF(items[i]);
        Py_XDECREF(t);
        return -1;
    }
    for (int i = 0; i < 11; i++) PyTuple_SET_ITEM(t, i, items[i]);
    int r = PyList_Append(rows, t);
    Py_DECREF(t);
    return r;
}

static PyObject *metadata_str(const unsigned char *p, Py_ssize_t n) {
    if (n == 0) {
        Py_INCREF(EmptyStr);
        return EmptyStr;
    }
    return PyUnicode_DecodeUTF8((const char *)p, n, "replace");
}

/*
 * Decode an OffsetCommitValue at b[vs:ve] into items[4..10]; 1 = done, 0 = not handled here (reference path),
 * -1 = error.
 */
static int decode_value(PyObject *bufobj, const unsigned char *b, Py_ssize_t vs, Py_ssize_t ve, PyObject *items[11]) {
    Py_ssize_t n = ve - vs;
    if (n < 2 || b[vs] != 0) return 0;
    int ver = b[vs + 1];
    if (ver == 3) {
        if (n < 16) return 0;
        unsigned ml = be16u(b + vs + 14);
        Py_ssize_t e = vs + 16 + ml;
        if (ml >= 0x8000 || e + 8 != ve) return 0;
        items[4] = PyLong_FromLong(3);
        items[5] = PyLong_FromLongLong(be64(b + vs + 2));
        items[6] = PyLong_FromLong(be32(b + vs + 10));
        items[7] = metadata_str(b + vs + 16, ml);
        items[8] = PyLong_FromLongLong(be64(b + e));
        Py_INCREF(Py_None); items[9] = Py_None;
        Py_INCREF(Py_None); items[10] = Py_None;
        return 1;
    }
    if (ver == 1 || ver == 0 || ver == 2) {
        if (n < 12) return 0;
        unsigned ml = be16u(b + vs + 10);
        Py_ssize_t e = vs + 12 + ml;
        if (ml >= 0x8000 || e + (ver == 1 ? 16 : 8) != ve) return 0;
        items[4] = PyLong_FromLong(ver);
        items[5] = PyLong_FromLongLong(be64(b + vs + 2));
        items[6] = PyLong_FromLong(-1);
        items[7] = metadata_str(b + vs + 12, ml);
        items[8] = PyLong_FromLongLong(be64(b + e));
        if (ver == 1) {
            items[9] = PyLong_FromLongLong(be64(b + e + 8));
        } else {
            Py_INCREF(Py_None); items[9] = Py_None;
        }
        Py_INCREF(Py_None); items[10] = Py_None;
        return 1;
    }
    if (ver == 4) {
        if (n < 15) return 0;
        Py_ssize_t p = vs + 14;
        unsigned c = b[p];
        if (c == 0 || c >= 0x80) return 0;
        Py_ssize_t e = p + c;
        if (e + 8 > ve) return 0;
        Py_ssize_t q = e + 8;
        if (!(q == ve || (q + 1 == ve && b[q] == 0))) {
            /* tagged fields (topicId): the Python helper builds the uuid string */
            PyObject *t = PyObject_CallFunction(OtherValueFn, "Onn", bufobj, vs, ve);
            if (t == NULL) return -1;
            if (t == Py_None || !PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 7) {
                Py_DECREF(t);
                return 0;
            }
            for (int i = 0; i < 7; i++) {
                items[4 + i] = PyTuple_GET_ITEM(t, i);
                Py_INCREF(items[4 + i]);
            }
            Py_DECREF(t);
            return 1;
        }
        items[4] = PyLong_FromLong(4);
        items[5] = PyLong_FromLongLong(be64(b + vs + 2));
        items[6] = PyLong_FromLong(be32(b + vs + 10));
        items[7] = metadata_str(b + p + 1, (Py_ssize_t)c - 1);
        items[8] = PyLong_FromLongLong(be64(b + e));
        Py_INCREF(Py_None); items[9] = Py_None;
        Py_INCREF(Py_None); items[10] = Py_None;
        return 1;
    }
    return 0;
}

static PyObject *walk_v2(PyObject *self, PyObject *args) {
    PyObject *bufobj, *rows, *kcache, *ktable, *gcache, *ctl_types, *ctl_epochs, *pending;
    Py_ssize_t pos, end, count;
    long long base_offset, ts_base, ts_scale;
    int is_control;
    if (!PyArg_ParseTuple(args, "OnnnLLLpO!O!O!O!O!O!O!", &bufobj, &pos, &end, &count, &base_offset, &ts_base,
                          &ts_scale, &is_control, &PyList_Type, &rows, &PyDict_Type, &kcache, &PyList_Type, &ktable,
                          &PyDict_Type, &gcache, &PyList_Type, &ctl_types, &PyList_Type, &ctl_epochs,
                          &PyList_Type, &pending))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    if (end > view.len || pos < 0 || pos > end) {
        PyBuffer_Release(&view);
        bail("bad bounds");
        return NULL;
    }
    int have_first = 0;
    long long first = 0;
    for (Py_ssize_t r = 0; r < count; r++) {
        int64_t length, tsd, offd, klen, vlen;
        if (pos >= end) { bail("fewer records than declared"); goto fail; }
        if (read_varint(b, &pos, end, 5, &length) < 0) goto fail;
        if (length < 0) { bail("negative record length"); goto fail; }
        Py_ssize_t rec_end = pos + (Py_ssize_t)length;
        if (length > end || rec_end > end) { bail("record runs past the batch"); goto fail; }
        pos += 1; /* attributes */
        if (read_varint(b, &pos, end, 10, &tsd) < 0) goto fail;
        if (read_varint(b, &pos, end, 5, &offd) < 0) goto fail;
        if (read_varint(b, &pos, end, 5, &klen) < 0) goto fail;
        Py_ssize_t ks = pos;
        if (klen >= 0) {
            if (klen > end - pos) { bail("key runs past the batch"); goto fail; }
            pos += (Py_ssize_t)klen;
        }
        if (read_varint(b, &pos, end, 5, &vlen) < 0) goto fail;
        Py_ssize_t vs = pos;
        if (vlen >= 0) {
            if (vlen > end - pos) { bail("value runs past the batch"); goto fail; }
            pos += (Py_ssize_t)vlen;
        }
        if (pos >= end || b[pos] != 0) { bail("record headers"); goto fail; }
        pos += 1;
        if (pos != rec_end) { bail("record size mismatch"); goto fail; }
        Py_ssize_t ve = pos - 1;
        long long offset = base_offset + offd;
        if (!have_first) { first = offset; have_first = 1; }
        long long ts = ts_base + tsd * ts_scale;
        PyObject *items[11];
        Py_ssize_t row_index = PyList_GET_SIZE(rows);

        if (is_control) {
            if (klen >= 4 && b[ks] < 0x80) {
                int ctype = be16(b + ks + 2);
                int epoch_ok = 1;
                long epoch = 0;
                if (ctype == 0 || ctype == 1) {
                    if (vlen >= 6 && b[vs] < 0x80) epoch = be32(b + vs + 2);
                    else epoch_ok = 0;
                }
                if (epoch_ok) {
                    PyObject *kid = PyDict_GetItemWithError(kcache, ControlKey);
                    if (kid == NULL) {
                        if (PyErr_Occurred()) goto fail;
                        kid = PyLong_FromSsize_t(PyList_GET_SIZE(ktable));
                        if (kid == NULL) goto fail;
                        if (PyList_Append(ktable, ControlEntry) < 0 || PyDict_SetItem(kcache, ControlKey, kid) < 0) {
                            Py_DECREF(kid);
                            goto fail;
                        }
                        Py_DECREF(kid); /* borrowed from the dict from here on */
                    }
                    PyObject *ct = PyLong_FromLong(ctype);
                    if (ct == NULL) goto fail;
                    PyObject *name = PyDict_GetItemWithError(ControlNames, ct);
                    Py_DECREF(ct);
                    if (name != NULL) Py_INCREF(name);
                    else if (PyErr_Occurred()) goto fail;
                    else name = PyUnicode_FromFormat("UNKNOWN(%d)", ctype);
                    if (name == NULL) goto fail;
                    PyObject *pair = Py_BuildValue("(nN)", row_index, name);
                    if (pair == NULL || PyList_Append(ctl_types, pair) < 0) { Py_XDECREF(pair); goto fail; }
                    Py_DECREF(pair);
                    if (ctype == 0 || ctype == 1) {
                        pair = Py_BuildValue("(nl)", row_index, epoch);
                        if (pair == NULL || PyList_Append(ctl_epochs, pair) < 0) { Py_XDECREF(pair); goto fail; }
                        Py_DECREF(pair);
                    }
                    items[0] = PyLong_FromLongLong(offset);
                    items[1] = PyLong_FromLongLong(ts);
                    Py_INCREF(kid); items[2] = kid;
                    items[3] = PyBool_FromLong(vlen < 0);
                    for (int i = 4; i < 11; i++) { Py_INCREF(Py_None); items[i] = Py_None; }
                    if (append_row(rows, items) < 0) goto fail;
                    continue;
                }
            }
        } else if (klen >= 0) {
            PyObject *key = PyBytes_FromStringAndSize((const char *)b + ks, (Py_ssize_t)klen);
            if (key == NULL) goto fail;
            PyObject *kid = PyDict_GetItemWithError(kcache, key);
            long kidv;
            if (kid != NULL) {
                Py_INCREF(kid);
            } else {
                if (PyErr_Occurred()) { Py_DECREF(key); goto fail; }
                kid = PyObject_CallFunctionObjArgs(KeyIdFn, key, kcache, ktable, gcache, NULL);
                if (kid == NULL) { Py_DECREF(key); goto fail; }
            }
            kidv = PyLong_AsLong(kid);
            if (kidv == -1 && PyErr_Occurred()) { Py_DECREF(kid); Py_DECREF(key); goto fail; }
            if (kidv >= 0) {
                int done = 0;
                for (int i = 0; i < 11; i++) items[i] = NULL;
                if (vlen < 0) {
                    items[3] = Py_True; Py_INCREF(Py_True);
                    for (int i = 4; i < 11; i++) { Py_INCREF(Py_None); items[i] = Py_None; }
                    done = 1;
                } else {
                    done = decode_value(bufobj, b, vs, ve, items);
                    if (done < 0) { Py_DECREF(kid); Py_DECREF(key); goto fail; }
                    if (done) { items[3] = Py_False; Py_INCREF(Py_False); }
                }
                if (done) {
                    items[0] = PyLong_FromLongLong(offset);
                    items[1] = PyLong_FromLongLong(ts);
                    items[2] = kid; /* steals */
                    Py_DECREF(key);
                    if (append_row(rows, items) < 0) goto fail;
                    continue;
                }
            }
            Py_DECREF(kid);
            Py_DECREF(key);
        }
        /* reference path for this record */
        {
            PyObject *key, *value;
            if (klen >= 0) key = PyBytes_FromStringAndSize((const char *)b + ks, (Py_ssize_t)klen);
            else { key = Py_None; Py_INCREF(key); }
            if (vlen >= 0) value = PyBytes_FromStringAndSize((const char *)b + vs, (Py_ssize_t)vlen);
            else { value = Py_None; Py_INCREF(value); }
            if (key == NULL || value == NULL) { Py_XDECREF(key); Py_XDECREF(value); goto fail; }
            PyObject *p = Py_BuildValue("(nLLNN)", row_index, (long long)offd, ts, key, value);
            if (p == NULL || PyList_Append(pending, p) < 0) { Py_XDECREF(p); goto fail; }
            Py_DECREF(p);
            if (PyList_Append(rows, Py_None) < 0) goto fail;
        }
    }
    if (pos != end) { bail("trailing bytes after the records"); goto fail; }
    PyBuffer_Release(&view);
    if (!have_first) Py_RETURN_NONE;
    return PyLong_FromLongLong(first);
fail:
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *init(PyObject *self, PyObject *args) {
    PyObject *bail_cls, *key_id, *other_value, *control_entry, *control_names;
    if (!PyArg_ParseTuple(args, "OOOOO!", &bail_cls, &key_id, &other_value, &control_entry, &PyDict_Type,
                          &control_names))
        return NULL;
    Py_XSETREF(Bail, Py_NewRef(bail_cls));
    Py_XSETREF(KeyIdFn, Py_NewRef(key_id));
    Py_XSETREF(OtherValueFn, Py_NewRef(other_value));
    Py_XSETREF(ControlEntry, Py_NewRef(control_entry));
    Py_XSETREF(ControlNames, Py_NewRef(control_names));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"walk_v2", walk_v2, METH_VARARGS, "Walk the records of a magic 2 batch into column tuples (see columnar.py)."},
    {"init", init, METH_VARARGS, "init(Bail, key_id, other_value, control_entry, control_names)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_fastdecode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastdecode(void) {
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    ControlKey = PyLong_FromLong(0);
    EmptyStr = PyUnicode_FromString("");
    if (ControlKey == NULL || EmptyStr == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
