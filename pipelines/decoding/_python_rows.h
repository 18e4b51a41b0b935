/* Decoded Arrow rows as the Python loaders read them (_python_rows.c). */
#ifndef OFFSETLAKE_PYTHON_ROWS_H
#define OFFSETLAKE_PYTHON_ROWS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* python_rows(schema_capsule, array_capsule, rows, narrow, narrow_columns, skip, row_type) -> list */
PyObject *python_rows(PyObject *self, PyObject *args);
#endif
