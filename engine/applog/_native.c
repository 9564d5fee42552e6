/* Compiled twins of engine.applog.batch.encode_batch, the one encoder of
 * LOG/IDX records (with their .crc entries) into a segment's pending buffers,
 * and of engine.applog.codec.crc_failures, the batch check of records against
 * their .crc entries (the Spark source's; see that function, below).
 *
 * encode_batch: the pure-Python function in engine/applog/batch.py is the
 * reference: this one must return the same value, append the same bytes, leave the same write
 * state and raise the same exception (type and message) for every argument
 * list, valid or hostile (tests/applog/test_applog_native.py compares them
 * with hypothesis).  It is a codec function: no I/O, no clock, no Python code
 * called (exact bytes/int/bytearray/list/tuple types only), so neither the
 * items nor the state list can change while it runs.  Its only state is the
 * caller's: the segment's write state, a list of 4 (LOG_OUT, CRC_OUT,
 * IDX_OUT, EXTENT; see batch.py), EXTENT a bytearray of six little-endian
 * i64 (BASE, NEXT_INDEX, LOG_AT, LIMIT, LAST_TIME, REPORT_AT), read and
 * checked whole before anything changes; on success the buffers grow and
 * NEXT_INDEX and LAST_TIME are written in place.  It returns the first item's
 * index when every item was encoded and LOG_OUT is below REPORT_AT; else,
 * negative, ~left: -1 when all were encoded and LOG_OUT reached REPORT_AT,
 * ~left when ``left`` items did not fit the segment.  One record may be
 * passed as bytes (no tuple to build for append).  engine.applog.writer picks
 * it once per process at import (engine.native, the kernel registry) and calls it under the
 * writer's lock, exactly where it would call the Python function.
 *
 * Layouts (engine/applog/codec.py), all little-endian:
 *
 *   record header  "<IIq"  u32 size, u32 flags, i64 time_ns      16 bytes
 *   .crc entry     "<I"    CRC-32 (zlib's) of header + data        4 bytes
 *   index entry    "<qQq"  i64 time_ns, u64 index, i64 offset     24 bytes
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

/* CRC-32 by carry-less multiplication where the CPU has it (x86-64 with
 * PCLMULQDQ and SSE4.1, checked once at import); the table below otherwise. */

#define RECORD_HEADER_SIZE 16
#define ENTRY_SIZE 24
#define CRC_SIZE 4
#define MAX_RECORD_SIZE 0xFFFFFFFFULL
#define MAX_FLAGS 0xFFFFFFFFLL

#include "crc32.h"

/* ---- little-endian loads and stores --------------------------------------------------- */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* The host's order is the format's: one store each. */
static inline void
put_u32(unsigned char *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static inline void
put_u64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static inline long long
get_i64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return (long long)v;
}
#else
static inline void
put_u32(unsigned char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

static inline void
put_u64(unsigned char *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

static inline long long
get_i64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v |= (uint64_t)p[k] << (8 * k);
    return (long long)v;
}
#endif

/* ---- argument parsing (the reference's checks, in its order) ---------------- */

/* An exact int as a long long; *overflow set when it does not fit (the caller
 * then reports "out of range" like the reference's comparisons do).
 * -1 with TypeError set when it is not an exact int.
 *
 * Ints of up to three 30-bit digits whose value fits 63 bits (every index,
 * offset and clock reading a log meets) are read from their digits directly,
 * as CPython 3.11's own small-int paths do; anything else (and other CPython
 * versions or digit sizes) goes through PyLong_AsLongLongAndOverflow. */
static inline int
get_int(PyObject *v, const char *name, long long *out, int *overflow)
{
    if (!PyLong_CheckExact(v)) {
        PyErr_Format(PyExc_TypeError, "encode_batch: %s must be an int", name);
        return -1;
    }
#if PY_VERSION_HEX < 0x030C0000 && PyLong_SHIFT == 30
    const digit *d = ((PyLongObject *)v)->ob_digit;
    switch (Py_SIZE(v)) { /* the sign and the number of digits */
    case 0:
        *overflow = 0;
        *out = 0;
        return 0;
    case 1:
        *overflow = 0;
        *out = (long long)d[0];
        return 0;
    case -1:
        *overflow = 0;
        *out = -(long long)d[0];
        return 0;
    case 2:
        *overflow = 0;
        *out = (long long)d[0] | (long long)d[1] << 30;
        return 0;
    case -2:
        *overflow = 0;
        *out = -((long long)d[0] | (long long)d[1] << 30);
        return 0;
    case 3:
        if (d[2] < 8) { /* < 2**63 */
            *overflow = 0;
            *out = (long long)d[0] | (long long)d[1] << 30 | (long long)d[2] << 60;
            return 0;
        }
        break;
    case -3:
        if (d[2] < 8) { /* > -2**63 */
            *overflow = 0;
            *out = -((long long)d[0] | (long long)d[1] << 30 | (long long)d[2] << 60);
            return 0;
        }
        break;
    default:
        break;
    }
#endif
    *out = PyLong_AsLongLongAndOverflow(v, overflow);
    if (*out == -1 && PyErr_Occurred())
        return -1;
    return 0;
}

/* Grow ``buf`` by ``extra`` bytes; its old length goes to *old.
 *
 * The buffers grow by a record at a time for as long as a segment lasts (the
 * in-memory index) or a buffer fills (the pending bytes), so they are grown
 * geometrically, by half again (a quarter past 1 MiB), rather than by
 * CPython's eighth, and to 80 KiB at least: a flush empties (frees) the
 * pending buffers, which then start again, and the default buffer of 64 KiB
 * then fills without another resize.  PyByteArray_Resize to that capacity,
 * then the length set back to what the bytes need, as PyByteArray_Resize's
 * own path for a size within the allocation does (length, trailing NUL).
 * When the bytes fit the room a bytearray has and no view of it is held, only
 * the length moves.  A held view: PyByteArray_Resize raises BufferError and
 * nothing changes.  (PyByteArrayObject's fields are CPython's public,
 * non-limited API.) */
#define MIN_ROOM (80 << 10)

static inline void
set_length(PyObject *buf, Py_ssize_t size)
{
    Py_SET_SIZE(buf, size);
    ((PyByteArrayObject *)buf)->ob_start[size] = '\0';
}

/* grow's path when the bytes do not fit the room ``buf`` has (or a view is held). */
static int
grow_room(PyObject *buf, Py_ssize_t want)
{
    Py_ssize_t room = want < MIN_ROOM ? MIN_ROOM : want + (want < (1 << 20) ? want / 2 : want / 4);
    if (PyByteArray_Resize(buf, room) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_MemoryError))
            return -1; /* BufferError: a view is held */
        PyErr_Clear(); /* no room for the spare capacity: the bytes alone */
        return PyByteArray_Resize(buf, want);
    }
    set_length(buf, want);
    return 0;
}

#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline int
grow(PyObject *buf, Py_ssize_t extra, Py_ssize_t *old)
{
    PyByteArrayObject *b = (PyByteArrayObject *)buf;
    Py_ssize_t size = Py_SIZE(buf);
    *old = size;
    if (extra > PY_SSIZE_T_MAX / 2 - size) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t want = size + extra;
    if (b->ob_exports == 0 && b->ob_bytes != NULL && want + (b->ob_start - b->ob_bytes) < b->ob_alloc) {
        set_length(buf, want);
        return 0;
    }
    return grow_room(buf, want);
}

/* Positions in the write state, and of the fields in its extent
 * (engine.applog.batch). */
enum { LOG_OUT, CRC_OUT, IDX_OUT, EXTENT, STATE_SIZE };
enum { BASE, NEXT_INDEX, LOG_AT, LIMIT, LAST_TIME, REPORT_AT, EXTENT_FIELDS };
#define EXTENT_SIZE (8 * EXTENT_FIELDS)

/* encode_batch(items, flags, time_ns, state) -> int: see engine.applog.batch. */
static PyObject *
encode_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "encode_batch() takes 4 positional arguments but %zd were given", nargs);
        return NULL;
    }
    /* One record (bytes) is a batch of one: item_at points at the argument. */
    PyObject *items = args[0];
    PyObject **item_at;
    Py_ssize_t n;
    if (PyBytes_CheckExact(items)) {
        item_at = (PyObject **)&args[0];
        n = 1;
    } else if (PyList_CheckExact(items)) {
        item_at = ((PyListObject *)items)->ob_item;
        n = PyList_GET_SIZE(items);
    } else if (PyTuple_CheckExact(items)) {
        item_at = ((PyTupleObject *)items)->ob_item;
        n = PyTuple_GET_SIZE(items);
    } else {
        PyErr_SetString(PyExc_TypeError, "encode_batch: items must be bytes, a list or a tuple");
        return NULL;
    }
    long long flags, t;
    int of_flags, of_t;
    if (get_int(args[1], "flags", &flags, &of_flags) < 0 || get_int(args[2], "time_ns", &t, &of_t) < 0)
        return NULL;
    PyObject *state = args[3];
    if (!PyList_CheckExact(state) || PyList_GET_SIZE(state) != STATE_SIZE) {
        PyErr_SetString(PyExc_TypeError, "encode_batch: state must be a list of 4");
        return NULL;
    }
    PyObject *log_out = PyList_GET_ITEM(state, LOG_OUT);
    PyObject *crc_out = PyList_GET_ITEM(state, CRC_OUT);
    PyObject *idx_out = PyList_GET_ITEM(state, IDX_OUT);
    PyObject *extent = PyList_GET_ITEM(state, EXTENT);
    if (!PyByteArray_CheckExact(log_out) || !PyByteArray_CheckExact(crc_out) || !PyByteArray_CheckExact(idx_out) ||
        !PyByteArray_CheckExact(extent)) {
        PyErr_SetString(PyExc_TypeError, "encode_batch: the state's buffers must be bytearrays");
        return NULL;
    }
    if (log_out == crc_out || log_out == idx_out || log_out == extent || crc_out == idx_out || crc_out == extent ||
        idx_out == extent) {
        PyErr_SetString(PyExc_ValueError, "encode_batch: the state's buffers must be four different bytearrays");
        return NULL;
    }
    if (PyByteArray_GET_SIZE(extent) != EXTENT_SIZE) {
        PyErr_SetString(PyExc_ValueError, "encode_batch: the state's extent must be 48 bytes");
        return NULL;
    }
    /* The extent is never resized here (only written in place), so this
     * pointer stays valid while the buffers grow. */
    unsigned char *ext = (unsigned char *)PyByteArray_AS_STRING(extent);
    long long base = get_i64(ext + 8 * BASE), index = get_i64(ext + 8 * NEXT_INDEX);
    long long log_at = get_i64(ext + 8 * LOG_AT), limit = get_i64(ext + 8 * LIMIT);
    long long last_time = get_i64(ext + 8 * LAST_TIME), report_at = get_i64(ext + 8 * REPORT_AT);
    if (of_flags || flags < 0 || flags > MAX_FLAGS) {
        PyErr_SetString(PyExc_ValueError, "encode_batch: flags must be a u32");
        return NULL;
    }
    if (of_t) {
        PyErr_SetString(PyExc_ValueError, "encode_batch: time_ns must be an i64");
        return NULL;
    }
    if (base < 0 || base > index || index > LLONG_MAX - (long long)n) {
        PyErr_SetString(PyExc_ValueError, "encode_batch: index out of range (BASE, NEXT_INDEX)");
        return NULL;
    }
    Py_ssize_t pending = PyByteArray_GET_SIZE(log_out);
    if (log_at < 0 || log_at > LLONG_MAX - (long long)pending) {
        PyErr_SetString(PyExc_ValueError,
                        "encode_batch: the log offset (LOG_AT, with the pending bytes) must be >= 0 and fit an i64");
        return NULL;
    }
    if (report_at < 0) {
        PyErr_SetString(PyExc_ValueError, "encode_batch: the report size (REPORT_AT) must be >= 0");
        return NULL;
    }
    long long offset = log_at + (long long)pending;
    /* Times never go backwards: the records get max(time_ns, last_time). */
    if (t < last_time)
        t = last_time;
    /* Every item checked before anything changes; the total saturates. */
    unsigned long long total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = item_at[i];
        if (!PyBytes_CheckExact(item)) {
            PyErr_Format(PyExc_TypeError, "encode_batch: item %zd is not bytes", i);
            return NULL;
        }
        unsigned long long size = (unsigned long long)PyBytes_GET_SIZE(item);
        if (size > MAX_RECORD_SIZE) {
            PyErr_Format(PyExc_ValueError, "encode_batch: item %zd is larger than %llu bytes", i, MAX_RECORD_SIZE);
            return NULL;
        }
        unsigned long long rec = RECORD_HEADER_SIZE + size;
        total = total > ULLONG_MAX - rec ? ULLONG_MAX : total + rec;
    }
    if (total > (unsigned long long)(LLONG_MAX - offset)) {
        PyErr_SetString(PyExc_ValueError, "encode_batch: the log would pass 2**63 - 1 bytes");
        return NULL;
    }
    /* How many fit (no overflow below: offset + total <= LLONG_MAX).  An
     * empty segment takes its first record whatever its size. */
    Py_ssize_t stop = n;
    Py_ssize_t log_bytes = (Py_ssize_t)total;
    if (offset + (long long)total > limit) {
        long long pos = offset;
        log_bytes = 0;
        for (stop = 0; stop < n; stop++) {
            long long rec = RECORD_HEADER_SIZE + (long long)PyBytes_GET_SIZE(item_at[stop]);
            if (pos + rec > limit && (index > base || stop > 0))
                break; /* the caller starts a new segment for the rest */
            pos += rec;
            log_bytes += (Py_ssize_t)rec;
        }
    }
    /* All encoded (or none given) with LOG_OUT staying below REPORT_AT: the
     * first record's index.  Otherwise ~left, negative: -1 when all were
     * encoded and LOG_OUT reached REPORT_AT, ~left when the last ``left``
     * did not fit the segment.  Made before anything changes: a failure to
     * make it changes nothing. */
    Py_ssize_t left = n - stop;
    PyObject *result;
    if (left == 0 && (long long)pending + (long long)log_bytes < report_at)
        result = PyLong_FromLongLong(index);
    else
        result = PyLong_FromSsize_t(~left);
    if (result == NULL || stop == 0)
        return result; /* nothing fits, or no items: nothing changes (like the reference) */
    /* The buffers grown together: a failure of one leaves all as they were
     * (the reference's rule). */
    Py_ssize_t log0, crc0, idx0;
    if (grow(log_out, log_bytes, &log0) < 0)
        goto fail;
    if (grow(crc_out, stop * CRC_SIZE, &crc0) < 0) {
        PyByteArray_Resize(log_out, log0);
        goto fail;
    }
    if (grow(idx_out, stop * ENTRY_SIZE, &idx0) < 0) {
        PyByteArray_Resize(log_out, log0);
        PyByteArray_Resize(crc_out, crc0);
        goto fail;
    }
    unsigned char *lp = (unsigned char *)PyByteArray_AS_STRING(log_out) + log0;
    unsigned char *cp = (unsigned char *)PyByteArray_AS_STRING(crc_out) + crc0;
    unsigned char *ip = (unsigned char *)PyByteArray_AS_STRING(idx_out) + idx0;
    long long pos = offset;
    for (Py_ssize_t i = 0; i < stop; i++) {
        PyObject *item = item_at[i];
        Py_ssize_t size = PyBytes_GET_SIZE(item);
        put_u32(lp, (uint32_t)size);
        put_u32(lp + 4, (uint32_t)flags);
        put_u64(lp + 8, (uint64_t)t);
        memcpy(lp + RECORD_HEADER_SIZE, PyBytes_AS_STRING(item), (size_t)size);
        put_u32(cp, crc32_of(lp, (size_t)size + RECORD_HEADER_SIZE));
        put_u64(ip, (uint64_t)t);
        put_u64(ip + 8, (uint64_t)(index + i));
        put_u64(ip + 16, (uint64_t)pos);
        pos += RECORD_HEADER_SIZE + size;
        lp += RECORD_HEADER_SIZE + size;
        cp += CRC_SIZE;
        ip += ENTRY_SIZE;
    }
    put_u64(ext + 8 * NEXT_INDEX, (uint64_t)(index + (long long)stop));
    put_u64(ext + 8 * LAST_TIME, (uint64_t)t);
    return result;

fail:
    Py_DECREF(result);
    return NULL;
}

/* crc_failures(log, crcs, count) -> list: see engine.applog.codec.crc_failures.
 *
 * The positions among the first ``count`` back-to-back records at the start of
 * ``log`` whose CRC-32 (header + data) differs from their u32 entry in
 * ``crcs``.  Both are exact bytes (immutable: nothing can change them while
 * the loop runs); every record's size is bounded by ``log`` before its bytes
 * are read.  Same checks, in the same order, and the same messages as the
 * reference. */
static PyObject *
crc_failures(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "crc_failures() takes 3 positional arguments but %zd were given", nargs);
        return NULL;
    }
    if (!PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "crc_failures: log and crcs must be bytes");
        return NULL;
    }
    if (!PyLong_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "crc_failures: count must be an int");
        return NULL;
    }
    int overflow = 0;
    long long count = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    if (overflow < 0 || (!overflow && count < 0)) {
        PyErr_SetString(PyExc_ValueError, "crc_failures: count must be >= 0");
        return NULL;
    }
    const unsigned char *log = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    const unsigned char *want = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    Py_ssize_t end_of_log = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t entries = PyBytes_GET_SIZE(args[1]) / CRC_SIZE;
    if (overflow > 0 || (long long)entries < count) {
        PyErr_Format(PyExc_ValueError, "crc_failures: %zd checksums, fewer than count", entries);
        return NULL;
    }
    PyObject *failing = PyList_New(0);
    if (failing == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        if (end_of_log - pos < RECORD_HEADER_SIZE) {
            PyErr_Format(PyExc_ValueError, "crc_failures: record %zd at byte %zd: its header runs past the end "
                         "(%zd bytes)", i, pos, end_of_log);
            goto fail;
        }
        const unsigned char *h = log + pos;
        uint64_t size = (uint64_t)h[0] | (uint64_t)h[1] << 8 | (uint64_t)h[2] << 16 | (uint64_t)h[3] << 24;
        /* pos + 16 <= end_of_log here, so the subtraction cannot go below zero. */
        if (size > (uint64_t)(end_of_log - pos - RECORD_HEADER_SIZE)) {
            PyErr_Format(PyExc_ValueError, "crc_failures: record %zd at byte %zd: its data runs past the end "
                         "(%zd bytes)", i, pos, end_of_log);
            goto fail;
        }
        size_t len = RECORD_HEADER_SIZE + (size_t)size;
        const unsigned char *w = want + CRC_SIZE * i;
        uint32_t expected = (uint32_t)w[0] | (uint32_t)w[1] << 8 | (uint32_t)w[2] << 16 | (uint32_t)w[3] << 24;
        if (crc32_of(h, len) != expected) {
            PyObject *at = PyLong_FromSsize_t(i);
            if (at == NULL || PyList_Append(failing, at) < 0) {
                Py_XDECREF(at);
                goto fail;
            }
            Py_DECREF(at);
        }
        pos += (Py_ssize_t)len;
    }
    return failing;

fail:
    Py_DECREF(failing);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"encode_batch", (PyCFunction)(void (*)(void))encode_batch, METH_FASTCALL,
     "encode_batch(items, flags, time_ns, state) -> int; see engine.applog.batch.encode_batch"},
    {"crc_failures", (PyCFunction)(void (*)(void))crc_failures, METH_FASTCALL,
     "crc_failures(log, crcs, count) -> list; see engine.applog.codec.crc_failures"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "engine.applog._native",
    "Compiled twins of engine.applog.batch.encode_batch and engine.applog.codec.crc_failures.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    crc_init();
    return PyModule_Create(&native_module);
}
