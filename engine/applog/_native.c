/* Compiled twin of engine.applog.batch.encode_batch: the one encoder of
 * LOG/IDX records (with their .crc entries) into a segment's pending buffers.
 *
 * The pure-Python function in engine/applog/batch.py is the reference: this
 * one must return the same value, append the same bytes, leave the same write
 * state and raise the same exception (type and message) for every argument
 * list, valid or hostile (tests/applog/test_applog_native.py compares them
 * with hypothesis).  It is a codec function: no I/O, no clock, no Python code
 * called (exact bytes/int/bytearray/list/tuple types only), so neither the
 * items nor the state list can change while it runs.  Its only state is the
 * caller's: the segment's write state, a list of 8 (LOG_OUT, CRC_OUT,
 * IDX_OUT, BASE, NEXT_INDEX, LOG_AT, LIMIT, LAST_TIME; see batch.py), read
 * and checked whole before anything changes; on success the buffers grow and
 * NEXT_INDEX and LAST_TIME are replaced.  One record may be passed as bytes
 * (no tuple to build for append).  engine.applog.writer picks it once per
 * process at import (engine.native.load) and calls it under the writer's
 * lock, exactly where it would call the Python function.
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
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_CRC_FOLD 1
#endif

#define RECORD_HEADER_SIZE 16
#define ENTRY_SIZE 24
#define CRC_SIZE 4
#define MAX_RECORD_SIZE 0xFFFFFFFFULL
#define MAX_FLAGS 0xFFFFFFFFLL

/* ---- CRC-32 (the zlib polynomial, reflected), slicing by 8 ---------------- */
static uint32_t crc_table[8][256];

static void
crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320U ^ (c >> 1) : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int k = 1; k < 8; k++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[k][n] = c;
        }
    }
}

/* crc32(buf, crc) exactly as zlib.crc32(buf, crc). */
static uint32_t
crc_update(uint32_t crc, const unsigned char *p, size_t len)
{
    crc = ~crc;
    while (len >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#ifdef HAVE_CRC_FOLD
/* Whether crc_fold may run here (set once by PyInit__native). */
static int crc_fold_ok = 0;

/* The CRC-32 register (pre- and post-inverted by the caller) after ``len``
 * bytes, ``len`` >= 64 and a multiple of 16: four 128-bit lanes folded by
 * carry-less multiplication, then reduced (Barrett) to 32 bits.  The method and
 * the constants (x^k mod P for the reflected zlib polynomial) are those of
 * Gopal, Ozturk et al., "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ Instruction" (Intel, 2009), as in zlib's and Linux's x86 code. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t
crc_fold(const unsigned char *buf, size_t len, uint32_t crc)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;
    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = k1k2;
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    x0 = k3k4;
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = poly;
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

/* CRC-32 of ``len`` bytes, exactly as zlib.crc32(bytes(p[:len])). */
static uint32_t
crc32_of(const unsigned char *p, size_t len)
{
#ifdef HAVE_CRC_FOLD
    if (crc_fold_ok && len >= 64) {
        size_t chunk = len & ~(size_t)15;
        uint32_t crc = ~crc_fold(p, chunk, 0xFFFFFFFFU);
        return crc_update(crc, p + chunk, len - chunk);
    }
#endif
    return crc_update(0, p, len);
}

/* ---- little-endian stores --------------------------------------------------- */
static void
put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static void
put_u64(unsigned char *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

/* ---- argument parsing (the reference's checks, in its order) ---------------- */

/* An exact int as a long long; *overflow set when it does not fit (the caller
 * then reports "out of range" like the reference's comparisons do).
 * -1 with TypeError set when it is not an exact int. */
static int
get_int(PyObject *v, const char *name, long long *out, int *overflow)
{
    if (!PyLong_CheckExact(v)) {
        PyErr_Format(PyExc_TypeError, "encode_batch: %s must be an int", name);
        return -1;
    }
    *out = PyLong_AsLongLongAndOverflow(v, overflow);
    if (*out == -1 && PyErr_Occurred())
        return -1;
    return 0;
}

/* Grow ``buf`` by ``extra`` bytes; its old length goes to *old. */
static int
grow(PyObject *buf, Py_ssize_t extra, Py_ssize_t *old)
{
    *old = PyByteArray_GET_SIZE(buf);
    if (extra > PY_SSIZE_T_MAX - *old) {
        PyErr_NoMemory();
        return -1;
    }
    return PyByteArray_Resize(buf, *old + extra);
}

/* Replace state[k] by ``value`` (a new reference, stolen). */
static void
set_state(PyObject *state, Py_ssize_t k, PyObject *value)
{
    PyObject *old = PyList_GET_ITEM(state, k);
    PyList_SET_ITEM(state, k, value);
    Py_DECREF(old); /* an int: no finalizer, no Python code runs */
}

/* Positions in the write state (engine.applog.batch). */
enum { LOG_OUT, CRC_OUT, IDX_OUT, BASE, NEXT_INDEX, LOG_AT, LIMIT, LAST_TIME, STATE_SIZE };

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
        PyErr_SetString(PyExc_TypeError, "encode_batch: state must be a list of 8");
        return NULL;
    }
    PyObject *log_out = PyList_GET_ITEM(state, LOG_OUT);
    PyObject *crc_out = PyList_GET_ITEM(state, CRC_OUT);
    PyObject *idx_out = PyList_GET_ITEM(state, IDX_OUT);
    if (!PyByteArray_CheckExact(log_out) || !PyByteArray_CheckExact(crc_out) || !PyByteArray_CheckExact(idx_out)) {
        PyErr_SetString(PyExc_TypeError, "encode_batch: the state's buffers must be bytearrays");
        return NULL;
    }
    if (log_out == crc_out || log_out == idx_out || crc_out == idx_out) {
        PyErr_SetString(PyExc_ValueError, "encode_batch: the state's buffers must be three different bytearrays");
        return NULL;
    }
    static const char *names[5] = {"state[BASE]", "state[NEXT_INDEX]", "state[LOG_AT]", "state[LIMIT]",
                                   "state[LAST_TIME]"};
    long long v[5];
    int of[5];
    for (int k = 0; k < 5; k++) {
        if (get_int(PyList_GET_ITEM(state, BASE + k), names[k], &v[k], &of[k]) < 0)
            return NULL;
    }
    long long base = v[0], index = v[1], log_at = v[2], limit = v[3], last_time = v[4];
    if (of_flags || flags < 0 || flags > MAX_FLAGS) {
        PyErr_SetString(PyExc_ValueError, "encode_batch: flags must be a u32");
        return NULL;
    }
    if (of_t) {
        PyErr_SetString(PyExc_ValueError, "encode_batch: time_ns must be an i64");
        return NULL;
    }
    if (of[3] || of[4]) {
        PyErr_SetString(PyExc_ValueError, "encode_batch: the state's limit and last time must be i64");
        return NULL;
    }
    if (of[0] || of[1] || base < 0 || base > index || index > LLONG_MAX - (long long)n) {
        PyErr_SetString(PyExc_ValueError, "encode_batch: index out of range (state[BASE], state[NEXT_INDEX])");
        return NULL;
    }
    if (of[2] || log_at < 0 || log_at > LLONG_MAX - (long long)PyByteArray_GET_SIZE(log_out)) {
        PyErr_SetString(PyExc_ValueError,
                        "encode_batch: the state's log offset (with the pending bytes) must be an i64 >= 0");
        return NULL;
    }
    long long offset = log_at + (long long)PyByteArray_GET_SIZE(log_out);
    /* Times never go backwards: the records get max(time_ns, last_time). */
    PyObject *time_obj = args[2];
    if (t < last_time) {
        t = last_time;
        time_obj = PyList_GET_ITEM(state, LAST_TIME);
    }
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
    /* How many fit (no overflow below: offset + total <= LLONG_MAX). */
    long long pos = offset;
    Py_ssize_t stop = 0;
    Py_ssize_t log_bytes = 0;
    for (; stop < n; stop++) {
        long long rec = RECORD_HEADER_SIZE + (long long)PyBytes_GET_SIZE(item_at[stop]);
        if (pos + rec > limit && (index > base || stop > 0))
            break; /* the caller starts a new segment for the rest */
        pos += rec;
        log_bytes += (Py_ssize_t)rec;
    }
    PyObject *result = PyLong_FromSsize_t(n - stop);
    if (result == NULL)
        return NULL;
    if (stop == 0)
        return result; /* nothing fits: nothing changes (like the reference's empty appends) */
    /* The state's new values first, then the buffers grown together: a failure
     * of either leaves everything as it was (the reference's rule). */
    PyObject *new_index = PyLong_FromLongLong(index + (long long)stop);
    Py_ssize_t log0 = 0, crc0 = 0, idx0 = 0;
    if (new_index == NULL || grow(log_out, log_bytes, &log0) < 0)
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
    pos = offset;
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
    set_state(state, NEXT_INDEX, new_index);
    Py_INCREF(time_obj);
    set_state(state, LAST_TIME, time_obj);
    return result;

fail:
    Py_XDECREF(new_index);
    Py_DECREF(result);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"encode_batch", (PyCFunction)(void (*)(void))encode_batch, METH_FASTCALL,
     "encode_batch(items, flags, time_ns, state) -> int; see engine.applog.batch.encode_batch"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "engine.applog._native",
    "Compiled twin of engine.applog.batch.encode_batch (see that module).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    crc_init();
#ifdef HAVE_CRC_FOLD
    __builtin_cpu_init();
    crc_fold_ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    return PyModule_Create(&native_module);
}
