/* The compiled twins of engine.queue.codec.decode_batch (the readers' hot loop), of
 * engine.queue.codec.decode_columns (the batch readers' columnar decode: the Spark
 * queue source), of engine.queue.codec.encode_check (the writer's CRC of each
 * write) and of engine.queue.codec.encode_put (the writer's PUT of each item).
 *
 * Each replaces one pure codec function, chosen once per process at import by
 * engine.native (the registry: kernel("queue.decode_batch") ...); the Python function is the reference
 * that ENGINE_PURE_PYTHON=1 runs and that tests/queue/test_queue_native.py compares
 * each one against: the same PUT tuples appended to ``out``, the same return value
 * (bytes; the same PutColumns), the same exceptions.  Layouts (little-endian, see
 * engine/queue/codec.py):
 *
 *   PUT 0x86: i32 size | i32 error_count | i64 xid | i64 add_time            (24 bytes) data
 *   PUT 0x88: i32 size | i32 error_count | i64 xid | i64 add_time | i64 expire (32 bytes) data
 *   CHECK 0x22: u32 crc32 | u32 length of the bytes since the previous CHECK   (8 bytes)
 *
 * Every other record goes through the Python decode_record (rare).  The crc32 is
 * crc_extend of engine/crc32.h (exactly zlib.crc32: the reference's; PCLMUL folding
 * where the CPU has it: about twice zlib's speed here), over the bytes in place.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "crc32.h"

#include "native.h"

static PyObject *put_type;         /* engine.queue.codec.Put */
static PyObject *decode_record;    /* engine.queue.codec.decode_record */
static PyObject *incomplete_exc;   /* engine.queue.codec.Incomplete */
static PyObject *bad_record_exc;   /* engine.queue.codec.BadRecord */
static PyObject *mismatch_exc;     /* engine.queue.codec.ChecksumMismatch */
static PyObject *columns_type;     /* engine.queue.codec.PutColumns */
static PyObject *max_errors_obj;   /* engine.queue.codec.MAX_ERROR_COUNT */
static PyObject *ref_encode_check; /* engine.queue.codec.encode_check (odd input) */
static PyObject *ref_encode_put;   /* engine.queue.codec.encode_put (odd input) */
static long long max_errors;       /* max_errors_obj's value */
static int codec_bound;

static const native_ref codec_refs[] = {
    {"Put", &put_type},
    {"decode_record", &decode_record},
    {"Incomplete", &incomplete_exc},
    {"BadRecord", &bad_record_exc},
    {"ChecksumMismatch", &mismatch_exc},
    {"PutColumns", &columns_type},
    {"MAX_ERROR_COUNT", &max_errors_obj},
    {"encode_check", &ref_encode_check},
    {"encode_put", &ref_encode_put},
    {NULL, NULL},
};

/* The codec's objects (engine/native.h), bound at the first call; also checks
 * what this file assumes of them (Put a tuple type, the limit an int). */
static int
load_codec(void)
{
    if (codec_bound)
        return 0;
    if (native_bind(&codec_bound, "engine.queue.codec", codec_refs) < 0)
        return -1;
    max_errors = PyLong_AsLongLong(max_errors_obj);
    if (max_errors == -1 && PyErr_Occurred()) {
        codec_bound = 0;
        return -1;
    }
    if (!PyType_Check(put_type) || !PyType_IsSubtype((PyTypeObject *)put_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "engine.queue.codec.Put is not a tuple type");
        codec_bound = 0;
        return -1;
    }
    return 0;
}

static int32_t
le_i32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static uint32_t
le_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int64_t
le_i64(const unsigned char *p)
{
    return (int64_t)((uint64_t)le_u32(p) | (uint64_t)le_u32(p + 4) << 32);
}

/* zlib.crc32(buf[start:end], running): crc_extend over the bytes in place. */
static uint32_t
crc_of(const unsigned char *base, Py_ssize_t start, Py_ssize_t end, uint32_t running)
{
    return crc_extend(running, base + start, (size_t)(end - start));
}

/* The CHECK record at ``pos`` (its 9 bytes are in the buffer): whether it vouches
 * for the ``covered`` bytes before ``since`` (their crc32 so far: ``running``) and
 * the bytes [since, pos): its length field is their count, its crc32 theirs. */
static int
check_matches(const unsigned char *p, Py_ssize_t pos, Py_ssize_t since, Py_ssize_t covered, uint32_t running)
{
    uint32_t want = le_u32(p + pos + 1), length = le_u32(p + pos + 5);
    return (Py_ssize_t)length == covered + pos - since && crc_of(p, since, pos, running) == want;
}

/* Raise ChecksumMismatch(offset, check_offset, covered, length) as the reference
 * does for the CHECK record at ``pos`` that covers ``covered`` bytes. */
static void
raise_mismatch(const unsigned char *p, Py_ssize_t pos, Py_ssize_t covered)
{
    PyObject *exc = PyObject_CallFunction(mismatch_exc, "nnnk", pos - covered, pos, covered,
                                          (unsigned long)le_u32(p + pos + 5));
    if (exc != NULL) {
        PyErr_SetObject(mismatch_exc, exc);
        Py_DECREF(exc);
    }
}

/* A Put(xid, data, add_time, expire_time, error_count) built as the reference's
 * tuple.__new__(Put, ...) does; steals nothing. */
static PyObject *
new_put(const unsigned char *p, Py_ssize_t start, int32_t length, int64_t xid, int64_t add_time, int has_expiry,
        int64_t expire, int32_t errors)
{
    PyObject *put = ((PyTypeObject *)put_type)->tp_alloc((PyTypeObject *)put_type, 5);
    if (put == NULL)
        return NULL;
    PyObject *items[5];
    items[0] = PyLong_FromLongLong(xid);
    items[1] = PyBytes_FromStringAndSize((const char *)p + start, length);
    items[2] = PyLong_FromLongLong(add_time);
    if (has_expiry) {
        items[3] = PyLong_FromLongLong(expire);
    } else {
        items[3] = Py_None;
        Py_INCREF(Py_None);
    }
    items[4] = PyLong_FromLong(errors);
    for (int i = 0; i < 5; i++) {
        if (items[i] == NULL) {
            for (int j = 0; j < 5; j++)
                Py_XDECREF(items[j]);
            Py_DECREF(put);
            return NULL;
        }
    }
    for (int i = 0; i < 5; i++)
        PyTuple_SET_ITEM(put, i, items[i]);
    return put;
}

/* A record at ``pos`` that the inlined PUT paths did not take: anything else, or
 * a PUT with impossible fields (decode_record gives the right error).  Returns
 * the offset after it; OTHER_STOP with ``*stop`` set ("incomplete", "marker") or
 * left as "more" (a bad record after good ones: those first, the error on the
 * next call); OTHER_ERROR with an exception set. */
#define OTHER_STOP (-1)
#define OTHER_ERROR (-2)
static Py_ssize_t
other_record(PyObject *obj, Py_ssize_t pos, Py_ssize_t size, int after_good, const char **stop)
{
    PyObject *decoded = PyObject_CallFunction(decode_record, "On", obj, pos);
    if (decoded == NULL) {
        if (PyErr_ExceptionMatches(incomplete_exc)) {
            PyErr_Clear();
            *stop = "incomplete";
            return OTHER_STOP;
        }
        if (PyErr_ExceptionMatches(bad_record_exc) && after_good) {
            PyErr_Clear();
            return OTHER_STOP;
        }
        return OTHER_ERROR;
    }
    PyObject *record = PyTuple_GetItem(decoded, 0);
    PyObject *end_obj = PyTuple_GetItem(decoded, 1);
    if (record == NULL || end_obj == NULL) {
        Py_DECREF(decoded);
        return OTHER_ERROR;
    }
    if (record == Py_None) {
        Py_DECREF(decoded);
        *stop = "marker";
        return OTHER_STOP;
    }
    Py_ssize_t end = PyLong_AsSsize_t(end_obj);
    Py_DECREF(decoded);
    if (end == -1 && PyErr_Occurred())
        return OTHER_ERROR;
    if (end <= pos || end > size) {
        PyErr_SetString(PyExc_SystemError, "decode_record returned an end outside the buffer");
        return OTHER_ERROR;
    }
    return end;
}

static PyObject *
decode_batch(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"buf", "pos", "out", "crc", "covered", "max_records", NULL};
    Py_buffer view;
    Py_ssize_t pos, covered = 0, max_records = 4096;
    PyObject *out, *crc_arg = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*nO!|On$n", kwlist, &view, &pos, &PyList_Type, &out, &crc_arg,
                                     &covered, &max_records))
        return NULL;
    PyObject *result = NULL;
    if (load_codec() < 0)
        goto done;
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "pos must be >= 0");
        goto done;
    }
    const unsigned char *p = view.buf;
    const Py_ssize_t size = view.len;
    const int checked = crc_arg != Py_None;
    unsigned long running = 0;
    if (checked) {
        running = PyLong_AsUnsignedLongMask(crc_arg);
        if (running == (unsigned long)-1 && PyErr_Occurred())
            goto done;
        running &= 0xFFFFFFFFUL;
    }
    Py_ssize_t since = pos, verified = 0;
    const char *stop = "more";
    for (Py_ssize_t n = 0; n < max_records; n++) {
        if (pos >= size) {
            stop = "end";
            break;
        }
        unsigned char cmd = p[pos];
        if (cmd == 0x86 || cmd == 0x88) {
            Py_ssize_t start = pos + (cmd == 0x86 ? 25 : 33);
            if (start > size) {
                stop = "incomplete";
                break;
            }
            int32_t length = le_i32(p + pos + 1), errors = le_i32(p + pos + 5);
            int64_t xid = le_i64(p + pos + 9), add_time = le_i64(p + pos + 17);
            int64_t expire = cmd == 0x88 ? le_i64(p + pos + 25) : 0;
            if (length >= 0 && xid > 0 && errors >= 0 && errors <= max_errors) {
                Py_ssize_t end = start + length;
                if (end > size) {
                    stop = "incomplete";
                    break;
                }
                PyObject *put = new_put(p, start, length, xid, add_time, cmd == 0x88, expire, errors);
                if (put == NULL)
                    goto done;
                int failed = PyList_Append(out, put);
                Py_DECREF(put);
                if (failed)
                    goto done;
                pos = end;
                continue;
            }
        } else if (cmd == 0x22) {
            if (pos + 9 > size) {
                stop = "incomplete";
                break;
            }
            if (checked) {
                if (!check_matches(p, pos, since, covered, (uint32_t)running)) {
                    if (verified)
                        break; /* "more": the records vouched for first, the mismatch on the next call */
                    raise_mismatch(p, pos, covered + pos - since);
                    goto done;
                }
                running = 0;
                covered = 0;
                since = pos + 9;
                verified = PyList_GET_SIZE(out);
            }
            pos += 9;
            continue;
        }
        /* Anything else (and PUTs with impossible fields, to get the right error). */
        Py_ssize_t next = other_record(view.obj, pos, size, verified != 0, &stop);
        if (next == OTHER_ERROR)
            goto done;
        if (next == OTHER_STOP)
            break;
        pos = next; /* not a PUT (a valid one takes the path above): skipped */
    }
    if (!checked) {
        result = Py_BuildValue("nsnii", pos, stop, PyList_GET_SIZE(out), 0, 0);
    } else {
        uint32_t tail = crc_of(p, since, pos, (uint32_t)running);
        result = Py_BuildValue("nsnkn", pos, stop, verified, (unsigned long)tail, covered + pos - since);
    }
done:
    PyBuffer_Release(&view);
    return result;
}

/* decode_columns(buf, pos, checked, max_items=65536): the compiled twin of
 * engine.queue.codec.decode_columns.  Two passes: the first walks and checks the
 * records exactly as the reference does (CHECK CRCs, framing, sizes; other
 * records through the Python decode_record) and notes where each PUT starts; the
 * second fills the columns of the PUTs a CHECK vouched for, from those offsets
 * (records the first pass accepted, each one bounds-checked again). */
static PyObject *
decode_columns(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"buf", "pos", "checked", "max_items", NULL};
    Py_buffer view;
    Py_ssize_t pos, max_items = 65536;
    int checked;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*np|n", kwlist, &view, &pos, &checked, &max_items))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t *starts = NULL; /* offsets of the PUT records decoded, in order */
    Py_ssize_t cap = 0;
    PyObject *cols[7] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    if (load_codec() < 0)
        goto done;
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "pos must be >= 0");
        goto done;
    }
    if (max_items < 1) {
        PyErr_SetString(PyExc_ValueError, "max_items must be >= 1");
        goto done;
    }
    const unsigned char *p = view.buf;
    const Py_ssize_t size = view.len;
    const Py_ssize_t first = pos;
    Py_ssize_t since = pos, end = pos, n = 0, vouched = 0, data_all = 0, data_vouched = 0;
    const char *stop = "more";
    while (vouched < max_items) {
        if (pos >= size) {
            stop = "end";
            break;
        }
        unsigned char cmd = p[pos];
        if (cmd == 0x86 || cmd == 0x88) {
            Py_ssize_t start = pos + (cmd == 0x86 ? 25 : 33);
            if (start > size) {
                stop = "incomplete";
                break;
            }
            int32_t length = le_i32(p + pos + 1), errors = le_i32(p + pos + 5);
            int64_t xid = le_i64(p + pos + 9);
            if (length >= 0 && xid > 0 && errors >= 0 && errors <= max_errors) {
                if (length > size - start) {
                    stop = "incomplete";
                    break;
                }
                if (n == cap) {
                    Py_ssize_t grown = cap ? 2 * cap : 1024;
                    Py_ssize_t *more = PyMem_Realloc(starts, (size_t)grown * sizeof *starts);
                    if (more == NULL) {
                        PyErr_NoMemory();
                        goto done;
                    }
                    starts = more;
                    cap = grown;
                }
                starts[n++] = pos;
                data_all += length;
                pos = start + length;
                if (!checked) {
                    vouched = n;
                    data_vouched = data_all;
                    end = pos;
                }
                continue;
            }
        } else if (cmd == 0x22) {
            if (pos + 9 > size) {
                stop = "incomplete";
                break;
            }
            if (checked) {
                if (!check_matches(p, pos, since, 0, 0)) {
                    if (vouched)
                        break; /* "more": the PUTs vouched for first, the error on the next call */
                    raise_mismatch(p, pos, pos - since);
                    goto done;
                }
                vouched = n;
                data_vouched = data_all;
                since = pos + 9;
            }
            pos += 9;
            if (!checked)
                end = pos;
            continue;
        }
        /* Anything else (and PUTs with impossible fields, to get the right error). */
        Py_ssize_t next = other_record(view.obj, pos, size, vouched != 0, &stop);
        if (next == OTHER_ERROR)
            goto done;
        if (next == OTHER_STOP)
            break;
        pos = next; /* not a PUT (a valid one takes the path above): skipped */
        if (!checked)
            end = pos;
    }
    if (checked)
        end = since;

    /* Second pass: the columns of the first ``vouched`` PUTs. */
    cols[0] = PyBytes_FromStringAndSize(NULL, 8 * vouched);          /* ids */
    cols[1] = PyBytes_FromStringAndSize(NULL, 8 * vouched);          /* add_times */
    cols[2] = PyBytes_FromStringAndSize(NULL, 8 * vouched);          /* expire_times */
    cols[3] = PyBytes_FromStringAndSize(NULL, vouched);              /* has_expiry */
    cols[4] = PyBytes_FromStringAndSize(NULL, 4 * vouched);          /* error_counts */
    cols[5] = PyBytes_FromStringAndSize(NULL, 8 * (vouched + 1));    /* offsets */
    cols[6] = PyBytes_FromStringAndSize(NULL, data_vouched);         /* data */
    for (int i = 0; i < 7; i++)
        if (cols[i] == NULL)
            goto done;
    unsigned char *ids = (unsigned char *)PyBytes_AS_STRING(cols[0]);
    unsigned char *adds = (unsigned char *)PyBytes_AS_STRING(cols[1]);
    unsigned char *exps = (unsigned char *)PyBytes_AS_STRING(cols[2]);
    unsigned char *has = (unsigned char *)PyBytes_AS_STRING(cols[3]);
    unsigned char *errs = (unsigned char *)PyBytes_AS_STRING(cols[4]);
    unsigned char *offs = (unsigned char *)PyBytes_AS_STRING(cols[5]);
    unsigned char *data = (unsigned char *)PyBytes_AS_STRING(cols[6]);
    memset(offs, 0, 8);
    Py_ssize_t filled = 0;
    int ascending = 1;
    int64_t previous = 0;
    for (Py_ssize_t k = 0; k < vouched; k++) {
        Py_ssize_t at = starts[k];
        int expiry = p[at] == 0x88;
        Py_ssize_t start = at + (expiry ? 33 : 25);
        int32_t length = le_i32(p + at + 1);
        if (at < first || start > size || length < 0 || length > size - start || length > data_vouched - filled) {
            PyErr_SetString(PyExc_SystemError, "decode_columns: a PUT moved between its passes");
            goto done;
        }
        int64_t xid = le_i64(p + at + 9);
        if (k > 0 && xid <= previous)
            ascending = 0;
        previous = xid;
        memcpy(ids + 8 * k, p + at + 9, 8);
        memcpy(adds + 8 * k, p + at + 17, 8);
        if (expiry)
            memcpy(exps + 8 * k, p + at + 25, 8);
        else
            memset(exps + 8 * k, 0, 8);
        has[k] = (unsigned char)expiry;
        memcpy(errs + 4 * k, p + at + 5, 4);
        memcpy(data + filled, p + start, (size_t)length);
        filled += length;
        uint64_t off = (uint64_t)filled;
        for (int b = 0; b < 8; b++)
            offs[8 * (k + 1) + b] = (unsigned char)(off >> (8 * b));
    }
    if (filled != data_vouched) {
        PyErr_SetString(PyExc_SystemError, "decode_columns: the data column does not add up");
        goto done;
    }
    result = PyObject_CallFunction(columns_type, "nnsnOOOOOOOO", end, pos, stop, vouched,
                                   ascending ? Py_True : Py_False, cols[0], cols[1], cols[2], cols[3], cols[4],
                                   cols[5], cols[6]);
done:
    for (int i = 0; i < 7; i++)
        Py_XDECREF(cols[i]);
    PyMem_Free(starts);
    PyBuffer_Release(&view);
    return result;
}

/* encode_check(records): the CHECK record covering ``records``, exactly as
 * engine.queue.codec.encode_check (0x22, crc32, length; the writer's CRC of each
 * write).  Lengths that do not fit the record's u32 go to the reference, for its
 * error. */
static PyObject *
encode_check(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if ((unsigned long long)view.len > 0xFFFFFFFFULL) {
        PyBuffer_Release(&view);
        if (load_codec() < 0)
            return NULL;
        return PyObject_CallOneArg(ref_encode_check, arg);
    }
    const uint32_t crc = crc32_of((const unsigned char *)view.buf, (size_t)view.len);
    const uint32_t length = (uint32_t)view.len;
    PyBuffer_Release(&view);
    unsigned char out[9] = {0x22};
    for (int i = 0; i < 4; i++) {
        out[1 + i] = (unsigned char)(crc >> (8 * i));
        out[5 + i] = (unsigned char)(length >> (8 * i));
    }
    return PyBytes_FromStringAndSize((const char *)out, sizeof out);
}

/* encode_put(xid, add_time, data, expire_time=None, error_count=0): one PUT record,
 * exactly as engine.queue.codec.encode_put (0x86, or 0x88 with an expiry; the
 * layouts above): the writer's encoder of every put.  Anything off its common path
 * (keywords, a data object that is not bytes, an int out of its field's range, an
 * id <= 0, another type) goes to the reference, for its result or its error. */
static PyObject *
reference_encode_put(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (load_codec() < 0)
        return NULL;
    return PyObject_Vectorcall(ref_encode_put, args, (size_t)nargs, kwnames);
}

static int
small_long(PyObject *obj, long long low, long long high, long long *out)
{
    if (!PyLong_CheckExact(obj))
        return 0;
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (value == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (value < low || value > high)
        return 0;
    *out = value;
    return 1;
}

static void
put_le(unsigned char *at, unsigned long long value, int bytes)
{
    for (int i = 0; i < bytes; i++)
        at[i] = (unsigned char)(value >> (8 * i));
}

static PyObject *
encode_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames != NULL || nargs < 3 || nargs > 5 || !PyBytes_CheckExact(args[2]))
        return reference_encode_put(args, nargs, kwnames);
    long long xid, add_time, expire = 0, errors = 0;
    int has_expiry = nargs >= 4 && args[3] != Py_None;
    const Py_ssize_t size = PyBytes_GET_SIZE(args[2]);
    if (!small_long(args[0], 1, INT64_MAX, &xid) || !small_long(args[1], INT64_MIN, INT64_MAX, &add_time) ||
        (has_expiry && !small_long(args[3], INT64_MIN, INT64_MAX, &expire)) ||
        (nargs == 5 && !small_long(args[4], INT32_MIN, INT32_MAX, &errors)) || size > INT32_MAX)
        return reference_encode_put(args, nargs, kwnames);
    const Py_ssize_t head = has_expiry ? 33 : 25;
    PyObject *out = PyBytes_FromStringAndSize(NULL, head + size);
    if (out == NULL)
        return NULL;
    unsigned char *at = (unsigned char *)PyBytes_AS_STRING(out);
    at[0] = has_expiry ? 0x88 : 0x86;
    put_le(at + 1, (unsigned long long)size, 4);
    put_le(at + 5, (unsigned long long)errors, 4);
    put_le(at + 9, (unsigned long long)xid, 8);
    put_le(at + 17, (unsigned long long)add_time, 8);
    if (has_expiry)
        put_le(at + 25, (unsigned long long)expire, 8);
    memcpy(at + head, PyBytes_AS_STRING(args[2]), (size_t)size);
    return out;
}

static PyMethodDef module_methods[] = {
    {"decode_batch", (PyCFunction)(void (*)(void))decode_batch, METH_VARARGS | METH_KEYWORDS,
     "decode_batch(buf, pos, out, crc=None, covered=0, *, max_records=4096): "
     "the compiled twin of engine.queue.codec.decode_batch."},
    {"decode_columns", (PyCFunction)(void (*)(void))decode_columns, METH_VARARGS | METH_KEYWORDS,
     "decode_columns(buf, pos, checked, max_items=65536): "
     "the compiled twin of engine.queue.codec.decode_columns."},
    {"encode_check", encode_check, METH_O,
     "encode_check(records): the compiled twin of engine.queue.codec.encode_check."},
    {"encode_put", (PyCFunction)(void (*)(void))encode_put, METH_FASTCALL | METH_KEYWORDS,
     "encode_put(xid, add_time, data, expire_time=None, error_count=0): "
     "the compiled twin of engine.queue.codec.encode_put."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "engine.queue._native", "Compiled twins of engine.queue.codec.decode_batch, decode_columns, encode_check and encode_put.", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    crc_init();
    return PyModule_Create(&module_def);
}
