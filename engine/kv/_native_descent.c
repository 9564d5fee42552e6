/* The compiled twins of engine.kv.descent: find (a get), leaf_pairs (one leaf of a
 * scan) and leaf_items (one leaf's entries), descents from a tree's root over the page images a store keeps.
 *
 * The pure-Python functions in engine/kv/descent.py are the reference: these must
 * return equal values and raise the same errors (NodeError with the same absolute
 * offset, expected and found; ValueError / TypeError for bad arguments) for every
 * input, valid, damaged or hostile (tests/kv/test_kv_native.py compares them with
 * hypothesis; stress/fuzz.py's ``kv_find`` target with atheris).  They are pure
 * functions of bytes: no I/O, no Python code called but engine.kv.node's NodeError,
 * every length and offset read from a page checked against the page before it is
 * used.  engine.kv.pager picks them once per process at import (engine.native.load)
 * and calls them where it would call the Python ones, under the same locks.
 *
 * Layouts (little-endian; docs/formats/kv.md), as engine/kv/_native.c:
 *
 *   node_head  u8 kind | u8 level | u16 count | u32 used | u32 crc | u64 next   20 bytes
 *   leaf       node_head  u16 key_len[count]  u16 value_len[count]  key*  value*
 *              (value_len 0xffff: a 12-byte ovf_ref u64 first_page | u32 length)
 *   branch     node_head  u16 key_len[count]  u64 child[count + 1]  key*
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "native.h"

#define HEAD 20
#define LEAF 0x4C
#define BRANCH 0x42
#define OVERFLOW_MARK 0xFFFF
#define OVERFLOW_REF 12
#define MAX_HEIGHT 48
#define MAX_PAGE 65536 /* engine.kv.node.MAX_PAGE */


static PyObject *node_error; /* engine.kv.node.NodeError */
static int node_bound;

static const native_ref node_refs[] = {
    {"NodeError", &node_error},
    {NULL, NULL},
};

/* The node module's objects (engine/native.h), bound at the first call. */
static int
load_node_module(void)
{
    return native_bind(&node_bound, "engine.kv.node", node_refs);
}

/* Raise NodeError(offset, expected, found) (found NULL: None); returns NULL. */
static PyObject *
fail(long long offset, const char *expected, const char *found)
{
    return native_raise(node_error, offset, expected, found);
}

/* ---- descents over page images (the twins of engine.kv.descent) ----------------------
 * find (a get) and leaf_items (one leaf of a scan) walk from a tree's root through
 * page images kept in a dict (page id -> bytes) that were verified when they were
 * read (CRC, key order: decode_node) or encoded by the writer.  Every page on the
 * way is checked again for what the walk relies on (kind and level, used size,
 * entry count and every length inside the used size, keys inside the parent's
 * separator range, child and overflow ids in 2..page_count), in the reference's
 * order and with its messages.  No Python code runs during a walk (an exact dict
 * with int keys): the images it points into stay alive, held besides. */
#define MAX_ENTRIES (MAX_PAGE / 4 + 1)
/* page ids * page size stay below 2**63 */
#define MAX_PAGE_COUNT ((long long)1 << 46)

/* -1, 0, 1 as bytes comparison of a[:alen] with b[:blen] (memcmp, then the shorter first). */
static int
keycmp(const unsigned char *a, size_t alen, const unsigned char *b, size_t blen)
{
    size_t common = alen < blen ? alen : blen;
    int c = common ? memcmp(a, b, common) : 0;
    if (c)
        return c < 0 ? -1 : 1;
    return alen < blen ? -1 : (alen > blen ? 1 : 0);
}

typedef struct {
    PyObject *images;
    long long page_count;
    PyObject *held[MAX_HEIGHT]; /* the images walked so far (lo/hi point into them) */
    int nheld;
    const unsigned char *lo, *hi; /* the separator range [lo, hi); NULL: no bound */
    size_t lo_len, hi_len;
    /* the current page: its bytes, entry count, absolute offset, key offsets
     * (offs[i] .. offs[i + 1] is key i; offs[n] where the keys end) */
    const unsigned char *p;
    Py_ssize_t n;
    long long base;
    uint32_t offs[MAX_ENTRIES + 1];
} Walk;

#define KEY(w, i) ((w)->p + (w)->offs[i])
#define KLEN(w, i) ((size_t)((w)->offs[(i) + 1] - (w)->offs[i]))

static void
walk_release(Walk *w)
{
    while (w->nheld)
        Py_DECREF(w->held[--w->nheld]);
}

/* Arguments shared by the walks: (images, root, height, ..., page_count); -1 on error. */
static int
walk_start(Walk *w, PyObject *const *args, Py_ssize_t count_at, long long *height)
{
    w->images = args[0];
    w->nheld = 0;
    w->lo = w->hi = NULL;
    w->lo_len = w->hi_len = 0;
    *height = PyLong_AsLongLong(args[2]);
    if (*height == -1 && PyErr_Occurred())
        return -1;
    if (*height < 1 || *height > MAX_HEIGHT) {
        PyErr_Format(PyExc_ValueError, "a tree height in 1..%d, not %lld", MAX_HEIGHT, *height);
        return -1;
    }
    w->page_count = PyLong_AsLongLong(args[count_at]);
    if (w->page_count == -1 && PyErr_Occurred())
        return -1;
    if (w->page_count < 0 || w->page_count > MAX_PAGE_COUNT) {
        PyErr_Format(PyExc_ValueError, "a page count in 0..%lld, not %lld", (long long)MAX_PAGE_COUNT, w->page_count);
        return -1;
    }
    long long root = PyLong_AsLongLong(args[1]);
    if (root == -1 && PyErr_Occurred())
        return -1;
    if (root < 2 || root > w->page_count) {
        PyErr_Format(PyExc_ValueError, "a root page in 2..%lld, not %lld", w->page_count, root);
        return -1;
    }
    return load_node_module();
}

/* Check the image of ``page`` (which must be a node of ``level`` inside the current
 * range) and make it the current page: 1; 0 if it is not in the images; -1 on error. */
static int
walk_page(Walk *w, long long page, long long level)
{
    char expected[96], found[64];
    PyObject *key = PyLong_FromLongLong(page);
    if (key == NULL)
        return -1;
    PyObject *data = PyDict_GetItemWithError(w->images, key);
    Py_DECREF(key);
    if (data == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyBytes_CheckExact(data)) {
        PyErr_SetString(PyExc_TypeError, "find: page images must be bytes");
        return -1;
    }
    Py_INCREF(data);
    w->held[w->nheld++] = data; /* levels strictly decrease: at most MAX_HEIGHT pages */
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t ps = PyBytes_GET_SIZE(data);
    long long base = page * (long long)ps;
    if (ps < HEAD) {
        snprintf(found, sizeof found, "%zd", ps);
        fail(base, "a page of at least 20 bytes", found);
        return -1;
    }
    if (p[0] != (level ? BRANCH : LEAF) || p[1] != level) {
        snprintf(expected, sizeof expected, "a node of level %lld (its parent's level - 1)", level);
        snprintf(found, sizeof found, "0x%02x %u", p[0], p[1]);
        fail(base + 1, expected, found);
        return -1;
    }
    Py_ssize_t n = (Py_ssize_t)le16(p + 2);
    uint32_t used = le32(p + 4);
    if ((Py_ssize_t)used > ps || used < HEAD) {
        snprintf(expected, sizeof expected, "a node's used size in %d..%zd", HEAD, ps);
        snprintf(found, sizeof found, "%u", (unsigned)used);
        fail(base + 4, expected, found);
        return -1;
    }
    Py_ssize_t end = HEAD + (level ? 10 * n + 8 : 4 * n);
    if (end > (Py_ssize_t)used) {
        snprintf(found, sizeof found, "%zd", n);
        fail(base + 2, "an entry count that fits the page", found);
        return -1;
    }
    /* n <= (used - HEAD) / 4 < MAX_ENTRIES: offs[0..n] fits; every sum fits 32 bits */
    uint64_t at = (uint64_t)end;
    for (Py_ssize_t i = 0; i < n; i++) {
        w->offs[i] = (uint32_t)at;
        at += le16(p + HEAD + 2 * i);
    }
    w->offs[n] = (uint32_t)at;
    if (!level) {
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t v = le16(p + HEAD + 2 * (n + i));
            at += v == OVERFLOW_MARK ? OVERFLOW_REF : v;
        }
    }
    if (at != used) {
        snprintf(expected, sizeof expected, "%s that end at the used size %u", level ? "keys" : "entries",
                 (unsigned)used);
        snprintf(found, sizeof found, "%llu", (unsigned long long)at);
        fail(base + 4, expected, found);
        return -1;
    }
    w->p = p; /* from here every key lies inside [end, used] */
    w->n = n;
    w->base = base;
    if (n && ((w->lo != NULL && keycmp(KEY(w, 0), KLEN(w, 0), w->lo, w->lo_len) < 0) ||
              (w->hi != NULL && keycmp(KEY(w, n - 1), KLEN(w, n - 1), w->hi, w->hi_len) >= 0))) {
        fail(base + HEAD, "keys inside the range its parent's separators give", NULL);
        return -1;
    }
    return 1;
}

/* bisect_left (right = 0) or bisect_right (right = 1) of key in the current page's keys. */
static Py_ssize_t
walk_bisect(Walk *w, const unsigned char *key, size_t key_len, int right)
{
    Py_ssize_t a = 0, b = w->n;
    while (a < b) {
        Py_ssize_t mid = (a + b) / 2;
        int c = keycmp(KEY(w, mid), KLEN(w, mid), key, key_len);
        if (right ? c <= 0 : c < 0)
            a = mid + 1;
        else
            b = mid;
    }
    return a;
}

/* Child i of the current branch: the range narrowed, its id checked; -1 on error. */
static long long
walk_child(Walk *w, Py_ssize_t i)
{
    if (i) {
        w->lo = KEY(w, i - 1);
        w->lo_len = KLEN(w, i - 1);
    }
    if (i < w->n) {
        w->hi = KEY(w, i);
        w->hi_len = KLEN(w, i);
    }
    Py_ssize_t at = HEAD + 2 * w->n + 8 * i;
    uint64_t child = le64(w->p + at);
    if (child < 2 || w->page_count < 2 || child > (uint64_t)w->page_count) {
        char expected[96], found[64];
        snprintf(expected, sizeof expected, "a child page in 2..%lld", w->page_count);
        snprintf(found, sizeof found, "%llu", (unsigned long long)child);
        fail(w->base + at, expected, found);
        return -1;
    }
    return (long long)child;
}

/* Where value i of the current leaf starts (the keys' end plus the values before it). */
static uint64_t
value_at(Walk *w, Py_ssize_t i)
{
    uint64_t at = w->offs[w->n];
    for (Py_ssize_t j = 0; j < i; j++) {
        uint32_t v = le16(w->p + HEAD + 2 * (w->n + j));
        at += v == OVERFLOW_MARK ? OVERFLOW_REF : v;
    }
    return at;
}

/* Value i of the current leaf starting at ``at``: bytes, or (first, length) of an
 * overflow value whose first page is checked. */
static PyObject *
leaf_value(Walk *w, Py_ssize_t i, uint64_t at)
{
    uint32_t v = le16(w->p + HEAD + 2 * (w->n + i));
    if (v != OVERFLOW_MARK)
        return PyBytes_FromStringAndSize((const char *)w->p + at, (Py_ssize_t)v);
    uint64_t first = le64(w->p + at);
    uint32_t length = le32(w->p + at + 8);
    if (first < 2 || w->page_count < 2 || first > (uint64_t)w->page_count) {
        char expected[96], found[64];
        snprintf(expected, sizeof expected, "an overflow page in 2..%lld", w->page_count);
        snprintf(found, sizeof found, "%llu", (unsigned long long)first);
        return fail(w->base + (long long)at, expected, found);
    }
    return Py_BuildValue("(KI)", (unsigned long long)first, (unsigned)length);
}

PyDoc_STRVAR(find_doc,
             "find(images, root, height, key, page_count)\n--\n\n"
             "The value under key in the tree at root (see engine.kv.descent.find_image, the\n"
             "reference): bytes, None, the int id of the first page not in images, or\n"
             "(first_page, length) of an overflow value; NodeError at an absolute offset.");

static PyObject *
find(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyDict_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) || !PyLong_CheckExact(args[2]) ||
        !PyBytes_CheckExact(args[3]) || !PyLong_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError, "find(images: dict, root: int, height: int, key: bytes, page_count: int)");
        return NULL;
    }
    Walk w;
    long long height;
    if (walk_start(&w, args, 4, &height) < 0)
        return NULL;
    const unsigned char *key = (const unsigned char *)PyBytes_AS_STRING(args[3]);
    size_t key_len = (size_t)PyBytes_GET_SIZE(args[3]);
    PyObject *result = NULL;
    long long page = PyLong_AsLongLong(args[1]);
    for (long long level = height - 1;; level--) {
        int r = walk_page(&w, page, level);
        if (r <= 0) {
            if (r == 0)
                result = PyLong_FromLongLong(page); /* not at hand: the caller reads it */
            break;
        }
        if (level) {
            page = walk_child(&w, walk_bisect(&w, key, key_len, 1));
            if (page < 0)
                break;
            continue;
        }
        Py_ssize_t i = walk_bisect(&w, key, key_len, 0);
        if (i == w.n || keycmp(KEY(&w, i), KLEN(&w, i), key, key_len) != 0) {
            result = Py_None;
            Py_INCREF(result);
        } else
            result = leaf_value(&w, i, value_at(&w, i));
        break;
    }
    walk_release(&w);
    return result;
}

/* Walk from the root to the leaf holding seek (NULL: none; before: the keys just below
 * it, as engine.kv.descent._leaf), which becomes the current page: 1; 0 if a page on the
 * way is not in the images (*page is its id); -1 on error. */
static int
walk_leaf(Walk *w, long long *page, long long height, const unsigned char *seek, size_t seek_len, int before)
{
    for (long long level = height - 1;; level--) {
        int r = walk_page(w, *page, level);
        if (r <= 0 || !level)
            return r;
        Py_ssize_t i = seek == NULL ? (before ? w->n : 0) : walk_bisect(w, seek, seek_len, !before);
        *page = walk_child(w, i);
        if (*page < 0)
            return -1;
    }
}

/* The current walk's separator range as (lo, hi) objects (None: no bound); -1 on error. */
static int
walk_range(Walk *w, PyObject **lo, PyObject **hi)
{
    *lo = w->lo == NULL ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)w->lo, (Py_ssize_t)w->lo_len);
    *hi = w->hi == NULL ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)w->hi, (Py_ssize_t)w->hi_len);
    return *lo == NULL || *hi == NULL ? -1 : 0;
}

PyDoc_STRVAR(leaf_items_doc,
             "leaf_items(images, root, height, seek, before, page_count)\n--\n\n"
             "One leaf's entries (see engine.kv.descent.leaf_items_image, the reference):\n"
             "(keys, values, lo, hi) of the leaf holding seek (before: the keys just below\n"
             "it; seek None: the first or, with before, the last leaf) and the separator range\n"
             "its parents give it, values bytes or (first_page, length); or the int id of\n"
             "the first page not in images; NodeError at an absolute offset.");

static PyObject *
leaf_items(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyDict_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) || !PyLong_CheckExact(args[2]) ||
        (args[3] != Py_None && !PyBytes_CheckExact(args[3])) || !PyBool_Check(args[4]) ||
        !PyLong_CheckExact(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "leaf_items(images: dict, root: int, height: int, seek: bytes | None, before: bool, "
                        "page_count: int)");
        return NULL;
    }
    Walk w;
    long long height;
    if (walk_start(&w, args, 5, &height) < 0)
        return NULL;
    int before = args[4] == Py_True;
    const unsigned char *seek = NULL;
    size_t seek_len = 0;
    if (args[3] != Py_None) {
        seek = (const unsigned char *)PyBytes_AS_STRING(args[3]);
        seek_len = (size_t)PyBytes_GET_SIZE(args[3]);
    }
    PyObject *result = NULL, *keys = NULL, *vals = NULL, *lo = NULL, *hi = NULL;
    long long page = PyLong_AsLongLong(args[1]);
    int r = walk_leaf(&w, &page, height, seek, seek_len, before);
    if (r == 0)
        result = PyLong_FromLongLong(page); /* not at hand: the caller reads it */
    if (r <= 0)
        goto done;
    keys = PyList_New(w.n);
    vals = PyList_New(w.n);
    if (keys == NULL || vals == NULL)
        goto done;
    uint64_t at = w.offs[w.n];
    for (Py_ssize_t i = 0; i < w.n; i++) {
        PyObject *k = PyBytes_FromStringAndSize((const char *)KEY(&w, i), (Py_ssize_t)KLEN(&w, i));
        if (k == NULL)
            goto done;
        PyList_SET_ITEM(keys, i, k);
    }
    for (Py_ssize_t i = 0; i < w.n; i++) {
        PyObject *v = leaf_value(&w, i, at);
        if (v == NULL)
            goto done;
        PyList_SET_ITEM(vals, i, v);
        uint32_t len = le16(w.p + HEAD + 2 * (w.n + i));
        at += len == OVERFLOW_MARK ? OVERFLOW_REF : len;
    }
    if (walk_range(&w, &lo, &hi) < 0)
        goto done;
    result = PyTuple_Pack(4, keys, vals, lo, hi);
done:
    Py_XDECREF(keys);
    Py_XDECREF(vals);
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    walk_release(&w);
    return result;
}

PyDoc_STRVAR(leaf_pairs_doc,
             "leaf_pairs(images, root, height, lower, upper, reverse, page_count)\n--\n\n"
             "One leaf of a scan of the keys in [lower, upper) (see\n"
             "engine.kv.descent.leaf_pairs_image, the reference): (pairs, lo, hi, overflow)\n"
             "with pairs the leaf's (key, value) in that range, in key order or reverse, values\n"
             "bytes or (first_page, length); or the int id of the first page not in images;\n"
             "NodeError at an absolute offset.");

static PyObject *
leaf_pairs(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyDict_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) || !PyLong_CheckExact(args[2]) ||
        (args[3] != Py_None && !PyBytes_CheckExact(args[3])) || (args[4] != Py_None && !PyBytes_CheckExact(args[4])) ||
        !PyBool_Check(args[5]) || !PyLong_CheckExact(args[6])) {
        PyErr_SetString(PyExc_TypeError,
                        "leaf_pairs(images: dict, root: int, height: int, lower: bytes | None, upper: bytes | None, "
                        "reverse: bool, page_count: int)");
        return NULL;
    }
    Walk w;
    long long height;
    if (walk_start(&w, args, 6, &height) < 0)
        return NULL;
    int reverse = args[5] == Py_True;
    const unsigned char *lower = NULL, *upper = NULL;
    size_t lower_len = 0, upper_len = 0;
    if (args[3] != Py_None) {
        lower = (const unsigned char *)PyBytes_AS_STRING(args[3]);
        lower_len = (size_t)PyBytes_GET_SIZE(args[3]);
    }
    if (args[4] != Py_None) {
        upper = (const unsigned char *)PyBytes_AS_STRING(args[4]);
        upper_len = (size_t)PyBytes_GET_SIZE(args[4]);
    }
    PyObject *result = NULL, *pairs = NULL, *lo = NULL, *hi = NULL;
    long long page = PyLong_AsLongLong(args[1]);
    int r = reverse ? walk_leaf(&w, &page, height, upper, upper_len, 1)
                    : walk_leaf(&w, &page, height, lower, lower_len, 0);
    if (r == 0)
        result = PyLong_FromLongLong(page); /* not at hand: the caller reads it */
    if (r <= 0)
        goto done;
    Py_ssize_t i = lower == NULL ? 0 : walk_bisect(&w, lower, lower_len, 0);
    Py_ssize_t end = upper == NULL ? w.n : walk_bisect(&w, upper, upper_len, 0);
    Py_ssize_t count = end > i ? end - i : 0;
    pairs = PyList_New(count);
    if (pairs == NULL)
        goto done;
    int overflow = 0;
    uint64_t at = value_at(&w, i < w.n ? i : w.n);
    for (Py_ssize_t j = 0; j < count; j++) { /* key order, so the first bad value raises */
        Py_ssize_t e = i + j;
        uint32_t len = le16(w.p + HEAD + 2 * (w.n + e));
        PyObject *k = PyBytes_FromStringAndSize((const char *)KEY(&w, e), (Py_ssize_t)KLEN(&w, e));
        if (k == NULL)
            goto done;
        PyObject *v = leaf_value(&w, e, at);
        if (v == NULL) {
            Py_DECREF(k);
            goto done;
        }
        overflow |= len == OVERFLOW_MARK;
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(k);
            Py_DECREF(v);
            goto done;
        }
        PyTuple_SET_ITEM(pair, 0, k);
        PyTuple_SET_ITEM(pair, 1, v);
        PyList_SET_ITEM(pairs, reverse ? count - 1 - j : j, pair);
        at += len == OVERFLOW_MARK ? OVERFLOW_REF : len;
    }
    if (walk_range(&w, &lo, &hi) < 0)
        goto done;
    result = PyTuple_Pack(4, pairs, lo, hi, overflow ? Py_True : Py_False);
done:
    Py_XDECREF(pairs);
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    walk_release(&w);
    return result;
}

#undef KEY
#undef KLEN

static PyMethodDef methods[] = {
    {"find", (PyCFunction)(void (*)(void))find, METH_FASTCALL, find_doc},
    {"leaf_items", (PyCFunction)(void (*)(void))leaf_items, METH_FASTCALL, leaf_items_doc},
    {"leaf_pairs", (PyCFunction)(void (*)(void))leaf_pairs, METH_FASTCALL, leaf_pairs_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "engine.kv._native_descent",
    "Compiled twins of engine.kv.descent (find, leaf_pairs, leaf_items).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__native_descent(void)
{
    return PyModule_Create(&module_def);
}
