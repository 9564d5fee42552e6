/* The compiled twins of engine.kv.node's node codec: decode_node (a B+tree node
 * page, leaf or branch, checked and decoded into the same Leaf / Branch objects)
 * and leaf_image / branch_image (exported as encode_leaf / encode_branch: a
 * node's page image).
 *
 * The pure-Python functions in engine/kv/node.py are the reference: these must
 * return equal objects (keys, values, children, size, level, a leaf's page and
 * value offsets) and equal bytes, and raise the same errors (NodeError with the
 * same offset, expected, found and message) for every input, valid, damaged or
 * hostile (tests/kv/test_kv_native.py compares them with hypothesis;
 * stress/fuzz.py's ``kv`` target with atheris).  They are codec functions: no
 * I/O, no Python code called but the constructors of engine.kv.node's own
 * classes, every length and offset read from a page checked against the page
 * before it is used.  engine.kv.pager picks them once per process at import
 * (the registry, engine/native.py) and calls them where it would call the Python ones,
 * under the same locks.
 *
 * Layouts (little-endian; docs/formats/kv.md):
 *
 *   node_head  u8 kind | u8 level | u16 count | u32 used | u32 crc | u64 next   20 bytes
 *   leaf       node_head  u16 key_len[count]  u16 value_len[count]  key*  value*
 *              (value_len 0xffff: a 12-byte ovf_ref u64 first_page | u32 length)
 *   branch     node_head  u16 key_len[count]  u64 child[count + 1]  key*
 *
 * The CRC is CRC-32C (Castagnoli) of the bytes [0, 8) and [12, used): the SSE4.2
 * instruction where the CPU has it (checked once at import), a table otherwise.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "native.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <nmmintrin.h>
#define HAVE_CRC32C_HW 1
#endif

#define HEAD 20
#define CRC_AT 8
#define LEAF 0x4C
#define BRANCH 0x42
#define OVERFLOW_MARK 0xFFFF
#define OVERFLOW_REF 12
#define MAX_HEIGHT 48
#define MAX_PAGE 65536 /* engine.kv.node.MAX_PAGE: every length then fits its u16 */

/* ---- CRC-32C ------------------------------------------------------------------ */
static uint32_t crc32c_table[256];
static int crc32c_hw_ok;

static void
crc32c_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0x82F63B78U ^ (c >> 1) : c >> 1;
        crc32c_table[n] = c;
    }
#ifdef HAVE_CRC32C_HW
    __builtin_cpu_init();
    crc32c_hw_ok = __builtin_cpu_supports("sse4.2");
#endif
}

/* ``crc`` (pre-inverted) over p[:len], one table lookup per byte. */
static uint32_t
crc32c_sw(uint32_t crc, const unsigned char *p, size_t len)
{
    while (len--)
        crc = crc32c_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#ifdef HAVE_CRC32C_HW
__attribute__((target("sse4.2"))) static uint32_t
crc32c_hw(uint32_t crc, const unsigned char *p, size_t len)
{
    uint64_t c = crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--)
        c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
#endif

/* ``crc`` (pre-inverted) over p[:len]; ``hw`` 0 forces the table. */
static uint32_t
crc32c_update(uint32_t crc, const unsigned char *p, size_t len, int hw)
{
#ifdef HAVE_CRC32C_HW
    if (hw && crc32c_hw_ok)
        return crc32c_hw(crc, p, len);
#endif
    return crc32c_sw(crc, p, len);
}


/* ---- engine.kv.node's classes, fetched once --------------------------------------- */
static PyObject *leaf_type;      /* engine.kv.node.Leaf */
static PyObject *branch_type;    /* engine.kv.node.Branch */
static PyObject *overflow_type;  /* engine.kv.node.Overflow */
static PyObject *node_error;     /* engine.kv.node.NodeError */
static PyObject *array_type;     /* array.array, as engine.kv.node imports it */
static PyObject *typecode_I;     /* "I" */
static int node_bound;

static const native_ref node_refs[] = {
    {"Leaf", &leaf_type},
    {"Branch", &branch_type},
    {"Overflow", &overflow_type},
    {"NodeError", &node_error},
    {"array", &array_type},
    {NULL, NULL},
};

/* The node module's objects (engine/native.h), bound at the first call. */
static int
load_node_module(void)
{
    if (node_bound)
        return 0;
    if (typecode_I == NULL && (typecode_I = PyUnicode_InternFromString("I")) == NULL)
        return -1;
    return native_bind(&node_bound, "engine.kv.node", node_refs);
}

/* Raise NodeError(offset, expected, found) (found NULL: None); returns NULL. */
static PyObject *
fail(long long offset, const char *expected, const char *found)
{
    return native_raise(node_error, offset, expected, found);
}

/* The keys at ``at`` with the lengths klen[0..n), as a new list of bytes. */
static PyObject *
slice_keys(const unsigned char *page, const unsigned char *klen, Py_ssize_t n, Py_ssize_t at)
{
    PyObject *keys = PyList_New(n);
    if (keys == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = (Py_ssize_t)le16(klen + 2 * i);
        PyObject *key = PyBytes_FromStringAndSize((const char *)page + at, len);
        if (key == NULL) {
            Py_DECREF(keys);
            return NULL;
        }
        PyList_SET_ITEM(keys, i, key);
        at += len;
    }
    return keys;
}

/* Whether the n keys at ``at`` (lengths klen) are strictly ascending, bytewise
 * with the shorter first on a common prefix. */
static int
ascending(const unsigned char *page, const unsigned char *klen, Py_ssize_t n, Py_ssize_t at)
{
    const unsigned char *prev = NULL;
    size_t prev_len = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t len = le16(klen + 2 * i);
        const unsigned char *key = page + at;
        if (prev != NULL) {
            size_t common = prev_len < len ? prev_len : len;
            int c = common ? memcmp(prev, key, common) : 0;
            if (c > 0 || (c == 0 && prev_len >= len))
                return 0;
        }
        prev = key;
        prev_len = len;
        at += (Py_ssize_t)len;
    }
    return 1;
}

static PyObject *
decode_leaf(PyObject *data, const unsigned char *page, Py_ssize_t n, uint32_t used, long long page_count, int eager)
{
    char found[64];
    Py_ssize_t end = HEAD + 4 * n;
    if (end > (Py_ssize_t)used) {
        snprintf(found, sizeof found, "%zd", n);
        return fail(2, "an entry count that fits the page", found);
    }
    const unsigned char *klen = page + HEAD;
    const unsigned char *vlen = page + HEAD + 2 * n;
    /* every length sums in 64 bits: 2 x 65,535 x 65,535 cannot wrap */
    uint64_t at = (uint64_t)end;
    int overflows = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        at += le16(klen + 2 * i);
    uint64_t values_at = at;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t v = le16(vlen + 2 * i);
        if (v == OVERFLOW_MARK) {
            v = OVERFLOW_REF;
            overflows = 1;
        }
        at += v;
    }
    if (at != used) {
        char expected[64];
        snprintf(expected, sizeof expected, "entries that end at the used size %u", (unsigned)used);
        snprintf(found, sizeof found, "%llu", (unsigned long long)at);
        return fail(4, expected, found);
    }
    /* from here every offset is inside [end, used] and used <= the page's length */
    if (!ascending(page, klen, n, end))
        return fail(end, "keys in strictly ascending order", NULL);
    PyObject *keys = slice_keys(page, klen, n, end);
    if (keys == NULL)
        return NULL;
    if (!overflows && !eager) {
        /* values stay in the page, sliced when asked for: the offsets as array('I') */
        PyObject *offs_bytes = PyBytes_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(uint32_t));
        if (offs_bytes == NULL) {
            Py_DECREF(keys);
            return NULL;
        }
        uint32_t *offs = (uint32_t *)PyBytes_AS_STRING(offs_bytes);
        uint32_t pos = (uint32_t)values_at;
        offs[0] = pos;
        for (Py_ssize_t i = 0; i < n; i++) {
            pos += le16(vlen + 2 * i);
            offs[i + 1] = pos;
        }
        PyObject *voffs = PyObject_CallFunctionObjArgs(array_type, typecode_I, offs_bytes, NULL);
        Py_DECREF(offs_bytes);
        if (voffs == NULL) {
            Py_DECREF(keys);
            return NULL;
        }
        PyObject *leaf = PyObject_CallFunction(leaf_type, "OOIOO", keys, Py_None, (unsigned)used, data, voffs);
        Py_DECREF(keys);
        Py_DECREF(voffs);
        return leaf;
    }
    PyObject *vals = PyList_New(n);
    if (vals == NULL) {
        Py_DECREF(keys);
        return NULL;
    }
    /* like the reference: every value sliced first, then the overflow references checked in order
     * (eager and without overflow values: the values sliced, nothing to check) */
    Py_ssize_t pos = (Py_ssize_t)values_at;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t v = le16(vlen + 2 * i);
        Py_ssize_t len = v == OVERFLOW_MARK ? OVERFLOW_REF : (Py_ssize_t)v;
        PyObject *val = PyBytes_FromStringAndSize((const char *)page + pos, len);
        if (val == NULL)
            goto error;
        PyList_SET_ITEM(vals, i, val);
        pos += len;
    }
    pos = (Py_ssize_t)values_at;
    for (Py_ssize_t i = 0; overflows && i < n; i++) {
        uint32_t v = le16(vlen + 2 * i);
        if (v != OVERFLOW_MARK) {
            pos += v;
            continue;
        }
        uint64_t first = le64(page + pos);
        uint32_t length = le32(page + pos + 8);
        if (first < 2 || (page_count < 2 || first > (uint64_t)page_count)) {
            char expected[96];
            snprintf(expected, sizeof expected, "an overflow page in 2..%lld", page_count);
            snprintf(found, sizeof found, "%llu", (unsigned long long)first);
            fail(pos, expected, found);
            goto error;
        }
        PyObject *ref = PyObject_CallFunction(overflow_type, "KI", (unsigned long long)first, (unsigned)length);
        if (ref == NULL)
            goto error;
        PyList_SetItem(vals, i, ref); /* steals ref, drops the sliced bytes */
        pos += OVERFLOW_REF;
    }
    PyObject *leaf = PyObject_CallFunction(leaf_type, "OOI", keys, vals, (unsigned)used);
    Py_DECREF(keys);
    Py_DECREF(vals);
    return leaf;
error:
    Py_DECREF(keys);
    Py_DECREF(vals);
    return NULL;
}

static PyObject *
decode_branch(const unsigned char *page, Py_ssize_t n, unsigned level, uint32_t used, long long page_count)
{
    char found[64];
    if (level < 1 || level > MAX_HEIGHT) {
        snprintf(found, sizeof found, "%u", level);
        return fail(1, "a branch level in 1..48", found);
    }
    Py_ssize_t end = HEAD + 10 * n + 8;
    if (end > (Py_ssize_t)used) {
        snprintf(found, sizeof found, "%zd", n);
        return fail(2, "a key count that fits the page", found);
    }
    const unsigned char *klen = page + HEAD;
    const unsigned char *kids = page + HEAD + 2 * n;
    uint64_t at = (uint64_t)end;
    for (Py_ssize_t i = 0; i < n; i++)
        at += le16(klen + 2 * i);
    if (at != used) {
        char expected[64];
        snprintf(expected, sizeof expected, "keys that end at the used size %u", (unsigned)used);
        snprintf(found, sizeof found, "%llu", (unsigned long long)at);
        return fail(4, expected, found);
    }
    if (!ascending(page, klen, n, end))
        return fail(end, "separator keys in strictly ascending order", NULL);
    for (Py_ssize_t i = 0; i <= n; i++) {
        uint64_t child = le64(kids + 8 * i);
        if (child < 2 || page_count < 2 || child > (uint64_t)page_count) {
            char expected[96];
            snprintf(expected, sizeof expected, "a child page in 2..%lld", page_count);
            snprintf(found, sizeof found, "%llu", (unsigned long long)child);
            return fail(HEAD + 2 * n + 8 * i, expected, found);
        }
    }
    PyObject *keys = slice_keys(page, klen, n, end);
    if (keys == NULL)
        return NULL;
    PyObject *children = PyList_New(n + 1);
    if (children == NULL) {
        Py_DECREF(keys);
        return NULL;
    }
    for (Py_ssize_t i = 0; i <= n; i++) {
        PyObject *child = PyLong_FromUnsignedLongLong(le64(kids + 8 * i));
        if (child == NULL) {
            Py_DECREF(keys);
            Py_DECREF(children);
            return NULL;
        }
        PyList_SET_ITEM(children, i, child);
    }
    PyObject *branch = PyObject_CallFunction(branch_type, "IOOI", level, keys, children, (unsigned)used);
    Py_DECREF(keys);
    Py_DECREF(children);
    return branch;
}

PyDoc_STRVAR(decode_node_doc,
             "decode_node(data, page_count, eager=False)\n--\n\n"
             "A leaf or branch page (bytes); NodeError if anything in it is inconsistent.\n"
             "The compiled twin of engine.kv.node.decode_node (same objects, same errors).");

static PyObject *
decode_node(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 && nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "decode_node(data, page_count, eager=False) takes 2 or 3 arguments");
        return NULL;
    }
    if (nargs == 3 && !PyBool_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "decode_node: eager must be a bool");
        return NULL;
    }
    int eager = nargs == 3 && args[2] == Py_True;
    PyObject *data = args[0];
    if (!PyBytes_CheckExact(data)) {
        PyErr_SetString(PyExc_TypeError, "decode_node: data must be bytes");
        return NULL;
    }
    if (!PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "decode_node: page_count must be an int");
        return NULL;
    }
    int overflow = 0;
    long long page_count = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (page_count == -1 && PyErr_Occurred())
        return NULL;
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "decode_node: page_count out of range");
        return NULL;
    }
    if (load_node_module() < 0)
        return NULL;
    const unsigned char *page = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t ps = PyBytes_GET_SIZE(data);
    char found[64];
    if (ps < HEAD) {
        snprintf(found, sizeof found, "%zd", ps);
        return fail(0, "a page of at least 20 bytes", found);
    }
    unsigned kind = page[0], level = page[1];
    Py_ssize_t n = (Py_ssize_t)le16(page + 2);
    uint32_t used = le32(page + 4), crc = le32(page + 8);
    uint64_t nxt = le64(page + 12);
    if ((Py_ssize_t)used > ps || used < HEAD || nxt) {
        char expected[80];
        char found2[80];
        snprintf(expected, sizeof expected, "a node's used size in %d..%zd and no next page", HEAD, ps);
        snprintf(found2, sizeof found2, "%u, next %llu", (unsigned)used, (unsigned long long)nxt);
        return fail(4, expected, found2);
    }
    uint32_t c = crc32c_update(0xFFFFFFFFU, page, CRC_AT, 1);
    c = crc32c_update(c, page + CRC_AT + 4, used - (CRC_AT + 4), 1) ^ 0xFFFFFFFFU;
    if (c != crc) {
        snprintf(found, sizeof found, "0x%08x (damaged)", (unsigned)crc);
        return fail(CRC_AT, "a node matching its CRC-32C", found);
    }
    if (kind == LEAF) {
        if (level) {
            snprintf(found, sizeof found, "%u", level);
            return fail(1, "level 0 in a leaf", found);
        }
        return decode_leaf(data, page, n, used, page_count, eager);
    }
    if (kind == BRANCH)
        return decode_branch(page, n, level, used, page_count);
    snprintf(found, sizeof found, "0x%02x", kind);
    return fail(0, "a leaf (0x4c) or branch (0x42) page", found);
}

/* ---- encoding ------------------------------------------------------------------------ */
static void
put16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void
put32(unsigned char *p, uint32_t v)
{
    put16(p, v);
    put16(p + 2, v >> 16);
}

static void
put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

/* The header (kind, level, count, used; next 0) and the CRC over [0, 8) and [12, used). */
static void
seal(unsigned char *page, unsigned kind, unsigned level, Py_ssize_t n, Py_ssize_t used)
{
    page[0] = (unsigned char)kind;
    page[1] = (unsigned char)level;
    put16(page + 2, (uint32_t)n);
    put32(page + 4, (uint32_t)used);
    uint32_t c = crc32c_update(0xFFFFFFFFU, page, CRC_AT, 1);
    c = crc32c_update(c, page + CRC_AT + 4, (size_t)used - (CRC_AT + 4), 1) ^ 0xFFFFFFFFU;
    put32(page + CRC_AT, c);
}

static PyObject *
too_big(const char *what, Py_ssize_t used, Py_ssize_t page_size)
{
    return PyErr_Format(PyExc_ValueError, "%s of %zd bytes does not fit a %zd-byte page", what, used, page_size);
}

/* An Overflow's (page, length), checked to fit u64 / u32. */
static int
overflow_fields(PyObject *ref, uint64_t *page, uint32_t *length)
{
    PyObject *p = PyObject_GetAttrString(ref, "page");
    if (p == NULL)
        return -1;
    PyObject *l = PyObject_GetAttrString(ref, "length");
    if (l == NULL) {
        Py_DECREF(p);
        return -1;
    }
    unsigned long long pv = PyLong_AsUnsignedLongLong(p);
    unsigned long lv = PyLong_AsUnsignedLong(l);
    Py_DECREF(p);
    Py_DECREF(l);
    if (PyErr_Occurred())
        return -1;
    if (lv > 0xFFFFFFFFUL) {
        PyErr_SetString(PyExc_OverflowError, "an overflow value's length does not fit 32 bits");
        return -1;
    }
    *page = pv;
    *length = (uint32_t)lv;
    return 0;
}

PyDoc_STRVAR(encode_leaf_doc,
             "encode_leaf(keys, vals, page_size)\n--\n\n"
             "A leaf page from its keys (list of bytes) and values (list of bytes or Overflow);\n"
             "ValueError if it does not fit.  The compiled twin of engine.kv.node.leaf_image.");

static PyObject *
encode_leaf(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "encode_leaf(keys: list, vals: list, page_size: int)");
        return NULL;
    }
    PyObject *keys = args[0], *vals = args[1];
    Py_ssize_t page_size = PyLong_AsSsize_t(args[2]);
    if (page_size == -1 && PyErr_Occurred())
        return NULL;
    if (load_node_module() < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(vals) != n) {
        PyErr_SetString(PyExc_ValueError, "encode_leaf: as many values as keys");
        return NULL;
    }
    if (page_size > MAX_PAGE)
        return PyErr_Format(PyExc_ValueError, "a page is at most %d bytes, not %zd", MAX_PAGE, page_size);
    /* sizes first (every item checked: nothing below can fail but the allocation) */
    Py_ssize_t used = HEAD + 4 * n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i), *v = PyList_GET_ITEM(vals, i);
        if (!PyBytes_CheckExact(k)) {
            PyErr_SetString(PyExc_TypeError, "encode_leaf: keys must be bytes");
            return NULL;
        }
        used += PyBytes_GET_SIZE(k);
        if (PyBytes_CheckExact(v))
            used += PyBytes_GET_SIZE(v);
        else if (PyObject_TypeCheck(v, (PyTypeObject *)overflow_type))
            used += OVERFLOW_REF;
        else {
            PyErr_SetString(PyExc_TypeError, "encode_leaf: values must be bytes or Overflow");
            return NULL;
        }
    }
    if (used > page_size)
        return too_big("leaf", used, page_size);
    PyObject *out = PyBytes_FromStringAndSize(NULL, page_size);
    if (out == NULL)
        return NULL;
    unsigned char *page = (unsigned char *)PyBytes_AS_STRING(out);
    /* every byte in [HEAD, used) is written below: zero only the header and the padding */
    memset(page, 0, HEAD);
    memset(page + used, 0, (size_t)(page_size - used));
    Py_ssize_t at = HEAD + 4 * n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        Py_ssize_t len = PyBytes_GET_SIZE(k);
        put16(page + HEAD + 2 * i, (uint32_t)len);
        memcpy(page + at, PyBytes_AS_STRING(k), (size_t)len);
        at += len;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(vals, i);
        if (PyBytes_CheckExact(v)) {
            Py_ssize_t len = PyBytes_GET_SIZE(v);
            put16(page + HEAD + 2 * n + 2 * i, (uint32_t)len);
            memcpy(page + at, PyBytes_AS_STRING(v), (size_t)len);
            at += len;
        } else {
            uint64_t first;
            uint32_t length;
            if (overflow_fields(v, &first, &length) < 0) {
                Py_DECREF(out);
                return NULL;
            }
            put16(page + HEAD + 2 * n + 2 * i, OVERFLOW_MARK);
            put64(page + at, first);
            put32(page + at + 8, length);
            at += OVERFLOW_REF;
        }
    }
    seal(page, LEAF, 0, n, used);
    return out;
}

PyDoc_STRVAR(encode_branch_doc,
             "encode_branch(level, keys, children, page_size)\n--\n\n"
             "A branch page from its level, separator keys (list of bytes) and children\n"
             "(list of len(keys) + 1 ints); ValueError if it does not fit.  The compiled\n"
             "twin of engine.kv.node.branch_image.");

static PyObject *
encode_branch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_CheckExact(args[1]) || !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "encode_branch(level: int, keys: list, children: list, page_size: int)");
        return NULL;
    }
    PyObject *keys = args[1], *children = args[2];
    long level = PyLong_AsLong(args[0]);
    if (level == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t page_size = PyLong_AsSsize_t(args[3]);
    if (page_size == -1 && PyErr_Occurred())
        return NULL;
    if (level < 0 || level > 255) {
        PyErr_SetString(PyExc_ValueError, "encode_branch: a level in 0..255");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(children) != n + 1) {
        PyErr_SetString(PyExc_ValueError, "encode_branch: one child more than keys");
        return NULL;
    }
    if (page_size > MAX_PAGE)
        return PyErr_Format(PyExc_ValueError, "a page is at most %d bytes, not %zd", MAX_PAGE, page_size);
    Py_ssize_t used = HEAD + 10 * n + 8;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        if (!PyBytes_CheckExact(k)) {
            PyErr_SetString(PyExc_TypeError, "encode_branch: keys must be bytes");
            return NULL;
        }
        used += PyBytes_GET_SIZE(k);
    }
    if (used > page_size)
        return too_big("branch", used, page_size);
    PyObject *out = PyBytes_FromStringAndSize(NULL, page_size);
    if (out == NULL)
        return NULL;
    unsigned char *page = (unsigned char *)PyBytes_AS_STRING(out);
    /* every byte in [HEAD, used) is written below: zero only the header and the padding */
    memset(page, 0, HEAD);
    memset(page + used, 0, (size_t)(page_size - used));
    for (Py_ssize_t i = 0; i <= n; i++) {
        unsigned long long child = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(children, i));
        if (child == (unsigned long long)-1 && PyErr_Occurred()) {
            Py_DECREF(out);
            return NULL;
        }
        put64(page + HEAD + 2 * n + 8 * i, child);
    }
    Py_ssize_t at = HEAD + 10 * n + 8;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        Py_ssize_t len = PyBytes_GET_SIZE(k);
        put16(page + HEAD + 2 * i, (uint32_t)len);
        memcpy(page + at, PyBytes_AS_STRING(k), (size_t)len);
        at += len;
    }
    seal(page, BRANCH, (unsigned)level, n, used);
    return out;
}

PyDoc_STRVAR(crc32c_doc,
             "crc32c(data, hardware=True)\n--\n\n"
             "The CRC-32C of data (bytes) as decode_node computes it; hardware=False\n"
             "forces the table (for the tests: both must equal engine.pages.crc32c).");

static PyObject *
crc32c(PyObject *self, PyObject *args)
{
    Py_buffer view;
    int hw = 1;
    if (!PyArg_ParseTuple(args, "y*|p", &view, &hw))
        return NULL;
    uint32_t c = crc32c_update(0xFFFFFFFFU, view.buf, (size_t)view.len, hw) ^ 0xFFFFFFFFU;
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

PyDoc_STRVAR(diff_span_doc,
             "diff_span(old, new, lo)\n--\n\n"
             "(start, end): the bytes from lo on where new differs from old, start the\n"
             "first differing index, end just past the last ((len, len): none differs).\n"
             "The twin of engine.kv.node.diff_span (same results, same errors).");

/* Eight bytes at a time while they match, then byte by byte: a 4 KiB page whose
   one value changed costs a few hundred loads, not the reference's slices. */
static PyObject *
diff_span(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "diff_span: takes old, new and lo");
        return NULL;
    }
    PyObject *old = args[0], *new_ = args[1];
    if (!PyBytes_CheckExact(old) || !PyBytes_CheckExact(new_)) {
        PyErr_SetString(PyExc_TypeError, "diff_span: old and new must be bytes");
        return NULL;
    }
    if (!PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "diff_span: lo must be an int");
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(new_);
    if (PyBytes_GET_SIZE(old) != size) {
        PyErr_SetString(PyExc_ValueError, "diff_span: old and new must be of one length");
        return NULL;
    }
    int overflow = 0;
    long long lo = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (lo == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || lo < 0 || lo > (long long)size) {
        PyErr_SetString(PyExc_ValueError, "diff_span: lo must be inside the bytes");
        return NULL;
    }
    const unsigned char *a = (const unsigned char *)PyBytes_AS_STRING(old);
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(new_);
    Py_ssize_t start = (Py_ssize_t)lo;
    while (size - start >= 8) {
        uint64_t x, y;
        memcpy(&x, a + start, 8);
        memcpy(&y, b + start, 8);
        if (x != y)
            break;
        start += 8;
    }
    while (start < size && a[start] == b[start])
        start++;
    if (start == size)
        return Py_BuildValue("(nn)", size, size);
    Py_ssize_t end = size;
    while (end - start >= 8) {
        uint64_t x, y;
        memcpy(&x, a + end - 8, 8);
        memcpy(&y, b + end - 8, 8);
        if (x != y)
            break;
        end -= 8;
    }
    while (end > start && a[end - 1] == b[end - 1])
        end--;
    return Py_BuildValue("(nn)", start, end);
}

static PyMethodDef methods[] = {
    {"diff_span", (PyCFunction)(void (*)(void))diff_span, METH_FASTCALL, diff_span_doc},
    {"decode_node", (PyCFunction)(void (*)(void))decode_node, METH_FASTCALL, decode_node_doc},
    {"encode_leaf", (PyCFunction)(void (*)(void))encode_leaf, METH_FASTCALL, encode_leaf_doc},
    {"encode_branch", (PyCFunction)(void (*)(void))encode_branch, METH_FASTCALL, encode_branch_doc},
    {"crc32c", crc32c, METH_VARARGS, crc32c_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "engine.kv._native", "Compiled twins of engine.kv.node's node codec (decode_node, encode_leaf, encode_branch, diff_span).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    crc32c_init();
    return PyModule_Create(&module_def);
}
