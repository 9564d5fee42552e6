/* Compiled twin of engine.streams.codec.crc64_reference (crcmod's CRC-64, the
 * check code of every journald record).
 *
 * crc64(data, crc=0) -> int, exactly as crcmod.mkCrcFun(0x1000000000000001B,
 * rev=True, initCrc=0, xorOut=0xFFFFFFFFFFFFFFFF): CRC-64/GO-ISO, the
 * polynomial P = x^64 + x^4 + x^3 + x + 1 reflected, register preset to all
 * ones, result complemented; ``crc`` chains (crc64(a + b) == crc64(b,
 * crc64(a))).  crcmod computes ``xorOut ^ crc`` in Python first (so any int is
 * taken modulo 2**64 and a non-int is the TypeError of ``^``), then reads
 * ``data`` through the buffer protocol (a str is a TypeError); this does the
 * same in the same order, with the same exception types and messages
 * (tests/streams/test_streams_native.py compares them with hypothesis).
 *
 * It is a codec function: no I/O, no state, no Python code called for bytes
 * and int arguments.  engine.streams.codec picks it once per process at import
 * (engine.native, the kernel registry) and calls it wherever it would call crcmod.
 *
 * Method: the polynomial is sparse, x^64 = Q = x^4 + x^3 + x + 1 (mod P), so
 * multiplying the 64-bit register by x^64 (one 8-byte step of a reflected CRC)
 * is a carry-less multiplication by Q: four shifts and XORs, plus the bits that
 * overflow past x^63 (degree < 4), multiplied by Q once more.  No tables, no
 * special instructions.  Long inputs go 64 bytes per step in eight independent
 * accumulators, each times x^512 = Q^8 (sparse too) in vector lanes; shorter
 * ones four words (32 bytes) per step: the register times x^256 = Q^4, the
 * other words times Q^3, Q^2, Q, so only one multiplication is on the chain
 * from one step to the next.
 * Inputs of GIL_RELEASE_SIZE bytes or more are checked with the GIL released
 * (the buffer stays exported, so a bytearray cannot be resized meanwhile).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Inputs at least this long are checked without the GIL. */
#define GIL_RELEASE_SIZE (64 * 1024)

static const uint64_t ONES = 0xFFFFFFFFFFFFFFFFULL;

/* In the reflected register bit b holds the coefficient of x^(63-b): times x^s
 * is a right shift by s, and the bits shifted out (degree 64 and up) are the
 * same shift left by 64-s in a second word, which is then reduced by Q. */

/* o * x^64 mod P where o (reflected) has degree < 60: o * Q. */
static inline uint64_t
reduce_q(uint64_t o)
{
    return o ^ (o >> 1) ^ (o >> 3) ^ (o >> 4);
}

/* a * x^64 mod P (= a * Q). */
static inline uint64_t
mul_q(uint64_t a)
{
    uint64_t lo = a ^ (a >> 1) ^ (a >> 3) ^ (a >> 4);
    uint64_t hi = (a << 63) ^ (a << 61) ^ (a << 60);
    return lo ^ reduce_q(hi);
}

/* a * x^128 mod P (= a * Q^2, Q^2 = x^8 + x^6 + x^2 + 1). */
static inline uint64_t
mul_q2(uint64_t a)
{
    uint64_t lo = a ^ (a >> 2) ^ (a >> 6) ^ (a >> 8);
    uint64_t hi = (a << 62) ^ (a << 58) ^ (a << 56);
    return lo ^ reduce_q(hi);
}

/* a * x^256 mod P (= a * Q^4, Q^4 = x^16 + x^12 + x^4 + 1). */
static inline uint64_t
mul_q4(uint64_t a)
{
    uint64_t lo = a ^ (a >> 4) ^ (a >> 12) ^ (a >> 16);
    uint64_t hi = (a << 60) ^ (a << 52) ^ (a << 48);
    return lo ^ reduce_q(hi);
}

static inline uint64_t
load_le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HAVE_LANES 1
/* Two 64-bit lanes (GCC's vector extension: SSE2 on any x86-64, no CPU check). */
typedef uint64_t lanes __attribute__((vector_size(16)));

/* Each lane times x^512 mod P (= Q^8, Q^8 = x^32 + x^24 + x^8 + 1); the
 * overflow has degree < 32, reduced by Q as in reduce_q. */
static inline lanes
lanes_mul_q8(lanes a)
{
    lanes lo = a ^ (a >> 8) ^ (a >> 24) ^ (a >> 32);
    lanes hi = (a << 56) ^ (a << 40) ^ (a << 32);
    return lo ^ hi ^ (hi >> 1) ^ (hi >> 3) ^ (hi >> 4);
}
#endif

/* The register (not complemented) after ``len`` more bytes.
 *
 * With words w_0..w_n-1 the register ends as R*x^(64n) + sum w_k*x^(64(n-k)).
 * Eight accumulators, one per word of each 64-byte block, each times x^512
 * per block (four vectors of two lanes, all independent), give A_j = the sum
 * over blocks b of w_(8b+j)*x^(512(B-1-b)); the register is then
 * sum A_j*x^(64(8-j)), which is the 8-byte step below run over A_0..A_7 from
 * zero.  The register itself enters as part of the first word. */
static uint64_t
crc64_update(uint64_t crc, const unsigned char *p, size_t len)
{
#ifdef HAVE_LANES
    if (len >= 256) {
        lanes acc[4];
        memcpy(acc, p, 64);
        acc[0][0] ^= crc;
        p += 64;
        len -= 64;
        while (len >= 64) {
            lanes x[4];
            memcpy(x, p, 64);
            acc[0] = lanes_mul_q8(acc[0]) ^ x[0];
            acc[1] = lanes_mul_q8(acc[1]) ^ x[1];
            acc[2] = lanes_mul_q8(acc[2]) ^ x[2];
            acc[3] = lanes_mul_q8(acc[3]) ^ x[3];
            p += 64;
            len -= 64;
        }
        crc = 0;
        for (int j = 0; j < 4; j++) {
            crc = mul_q(crc ^ acc[j][0]);
            crc = mul_q(crc ^ acc[j][1]);
        }
    }
#endif
    while (len >= 32) {
        uint64_t w0 = crc ^ load_le64(p);
        uint64_t w1 = load_le64(p + 8);
        uint64_t w2 = load_le64(p + 16);
        uint64_t w3 = load_le64(p + 24);
        /* w0*Q^4 + w1*Q^3 + w2*Q^2 + w3*Q, as w0*Q^4 + w2*Q^2 + (w1*Q^2 + w3)*Q */
        crc = mul_q4(w0) ^ mul_q2(w2) ^ mul_q(mul_q2(w1) ^ w3);
        p += 32;
        len -= 32;
    }
    while (len >= 8) {
        crc = mul_q(crc ^ load_le64(p));
        p += 8;
        len -= 8;
    }
    while (len--) {
        /* One byte: (crc ^ b) * x^8; the low 8 bits overflow past x^63. */
        crc ^= *p++;
        uint64_t hi = crc << 56;
        crc = (crc >> 8) ^ reduce_q(hi);
    }
    return crc;
}

/* crc64(data, crc=0) -> int: see the comment at the top. */
static PyObject *
crc64(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    /* Parsed by hand (METH_FASTCALL: no tuple, no dict per call): data, crc. */
    PyObject *data = nargs > 0 ? args[0] : NULL, *crc_obj = nargs > 1 ? args[1] : NULL;
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError, "crc64() takes at most 2 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        PyObject **slot;
        if (PyUnicode_CompareWithASCIIString(name, "data") == 0)
            slot = &data;
        else if (PyUnicode_CompareWithASCIIString(name, "crc") == 0)
            slot = &crc_obj;
        else {
            PyErr_Format(PyExc_TypeError, "crc64() got an unexpected keyword argument '%U'", name);
            return NULL;
        }
        if (*slot != NULL) {
            PyErr_Format(PyExc_TypeError, "crc64() got multiple values for argument '%U'", name);
            return NULL;
        }
        *slot = args[nargs + k];
    }
    if (data == NULL) {
        PyErr_SetString(PyExc_TypeError, "crc64() missing required argument 'data'");
        return NULL;
    }
    uint64_t crc = 0;
    if (crc_obj != NULL) {
        if (PyLong_CheckExact(crc_obj)) {
            crc = PyLong_AsUnsignedLongLongMask(crc_obj);
            if (crc == (uint64_t)-1 && PyErr_Occurred())
                return NULL;
        } else {
            /* crcmod's ``xorOut ^ crc``: whatever ``^`` does with this object. */
            PyObject *ones = PyLong_FromUnsignedLongLong(ONES);
            if (ones == NULL)
                return NULL;
            PyObject *mixed = PyNumber_Xor(ones, crc_obj);
            Py_DECREF(ones);
            if (mixed == NULL)
                return NULL;
            uint64_t reg = PyLong_AsUnsignedLongLongMask(mixed);
            Py_DECREF(mixed);
            if (reg == (uint64_t)-1 && PyErr_Occurred())
                return NULL;
            crc = reg ^ ONES;
        }
    }
    if (PyUnicode_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "Unicode-objects must be encoded before calculating a CRC");
        return NULL;
    }
    if (!PyObject_CheckBuffer(data)) {
        PyErr_SetString(PyExc_TypeError, "object supporting the buffer API required");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    size_t len = (size_t)view.len;
    uint64_t reg = crc ^ ONES;
    if (len >= GIL_RELEASE_SIZE) {
        Py_BEGIN_ALLOW_THREADS
        reg = crc64_update(reg, p, len);
        Py_END_ALLOW_THREADS
    } else {
        reg = crc64_update(reg, p, len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(reg ^ ONES);
}

static PyMethodDef module_methods[] = {
    {"crc64", (PyCFunction)(void (*)(void))crc64, METH_FASTCALL | METH_KEYWORDS,
     "crc64(data, crc=0) -> int; see engine.streams.codec.crc64_reference"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "engine.streams._native",
    "Compiled twin of engine.streams.codec.crc64_reference (crcmod's CRC-64/GO-ISO).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModule_Create(&native_module);
}
