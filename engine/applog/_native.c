/* Native twin of engine/applog/fastpath.py: the per-record fast path of
 * AppendLog.append (sync="never" or a period).
 *
 * The pure-Python reference is engine/applog/fastpath.py (class Appender);
 * this file must behave identically (tests/applog/test_applog_native.py runs
 * both on random valid and invalid calls and compares results, errors and
 * bytes).  Layout of what it produces (see engine/applog/codec.py):
 *
 *   record header  "<IIq"  u32 size, u32 flags, i64 time_ns      16 bytes
 *   .crc entry     "<I"    CRC-32 (zlib's) of header + data        4 bytes
 *   index entry    "<qQq"  i64 time_ns, u64 index, i64 offset     24 bytes
 *
 * Design: the Appender only ever *adds* records to its own pending buffers
 * while it is "armed"; anything unusual (a non-bytes payload, odd flags or
 * time, a record that needs a new segment, keyword arguments, a disarmed
 * appender) is handed unchanged to the Python slow path (the ``slow``
 * callable, AppendLog's own append), which raises the reference's errors.
 * The fast path calls no Python code and never releases the GIL, so it is
 * atomic with respect to other Python threads; the writer disarms the
 * appender (and takes its pending records, take()) before any of its own
 * code reads or changes the log's state, and only its slow append, holding
 * the writer's lock, arms it again.  A free-threaded build has no such
 * guarantee, so the module refuses to build there.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#ifdef Py_GIL_DISABLED
#error "engine.applog._native relies on the GIL for the appender's atomicity"
#endif

#define RECORD_HEADER_SIZE 16
#define ENTRY_SIZE 24
#define CRC_SIZE 4
#define MAX_RECORD_SIZE 0xFFFFFFFFULL
#define MAX_FLAGS 0xFFFFFFFFULL

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

/* ---- a growable byte buffer ------------------------------------------------- */
typedef struct {
    unsigned char *data;
    size_t len;
    size_t cap;
} Buf;

/* Room for ``extra`` more bytes; -1 with MemoryError set on failure. */
static int
buf_reserve(Buf *b, size_t extra)
{
    if (extra > (size_t)PY_SSIZE_T_MAX - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    size_t need = b->len + extra;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need)
        cap = cap > (size_t)PY_SSIZE_T_MAX / 2 ? need : cap * 2;
    unsigned char *p = PyMem_Realloc(b->data, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

static void
buf_free(Buf *b)
{
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- the Appender type ------------------------------------------------------ */
typedef struct {
    PyObject_HEAD
    PyObject *slow;         /* AppendLog.append bound to the log: the reference path */
    PyObject *flush;        /* called once the pending log bytes reach flush_at */
    char armed;             /* the writer lets the fast path append */
    long long next_index;   /* index of the next record */
    long long log_size;     /* active log's size including pending records */
    long long seg_count;    /* records in the active segment including pending ones */
    long long last_time;    /* newest record's time (INT64_MIN: none) */
    long long segment_bytes;
    long long flush_at;     /* hand over to the slow path once this many log bytes are pending */
    long long pending;      /* records buffered here since the last take() */
    long long first_time;   /* time of the first pending record */
    Buf log, crc, idx;
} Appender;

static int
Appender_init(Appender *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"slow", "flush", NULL};
    PyObject *slow, *flush;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:Appender", kwlist, &slow, &flush))
        return -1;
    if (!PyCallable_Check(slow) || !PyCallable_Check(flush)) {
        PyErr_SetString(PyExc_TypeError, "slow and flush must be callable");
        return -1;
    }
    Py_INCREF(slow);
    Py_XSETREF(self->slow, slow);
    Py_INCREF(flush);
    Py_XSETREF(self->flush, flush);
    self->armed = 0;
    self->next_index = 0;
    self->log_size = 0;
    self->seg_count = 0;
    self->last_time = INT64_MIN;
    self->segment_bytes = 0;
    self->flush_at = 0;
    self->pending = 0;
    self->first_time = 0;
    self->log.len = self->crc.len = self->idx.len = 0;
    return 0;
}

static int
Appender_traverse(Appender *self, visitproc visit, void *arg)
{
    Py_VISIT(self->slow);
    Py_VISIT(self->flush);
    return 0;
}

static int
Appender_clear(Appender *self)
{
    self->armed = 0;
    Py_CLEAR(self->slow);
    Py_CLEAR(self->flush);
    return 0;
}

static void
Appender_dealloc(Appender *self)
{
    PyObject_GC_UnTrack(self);
    Appender_clear(self);
    buf_free(&self->log);
    buf_free(&self->crc);
    buf_free(&self->idx);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The slow path with exactly the caller's arguments. */
static PyObject *
call_slow(Appender *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (self->slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Appender is not initialised");
        return NULL;
    }
    PyObject *slow = self->slow;
    Py_INCREF(slow); /* the call may drop the appender's reference */
    PyObject *res = PyObject_Vectorcall(slow, args, (size_t)nargs, kwnames);
    Py_DECREF(slow);
    return res;
}

/* One validated record into the pending buffers (room reserved by the caller). */
static void
put_record(Appender *self, const char *data, Py_ssize_t size, uint32_t flags, long long t)
{
    long long rec = RECORD_HEADER_SIZE + (long long)size;
    unsigned char *head = self->log.data + self->log.len;
    put_u32(head, (uint32_t)size);
    put_u32(head + 4, flags);
    put_u64(head + 8, (uint64_t)t);
    memcpy(head + RECORD_HEADER_SIZE, data, (size_t)size);
    put_u32(self->crc.data + self->crc.len, crc_update(0, head, (size_t)rec));
    unsigned char *entry = self->idx.data + self->idx.len;
    put_u64(entry, (uint64_t)t);
    put_u64(entry + 8, (uint64_t)self->next_index);
    put_u64(entry + 16, (uint64_t)self->log_size);
    self->log.len += (size_t)rec;
    self->crc.len += CRC_SIZE;
    self->idx.len += ENTRY_SIZE;
    if (!self->pending)
        self->first_time = t;
    self->pending += 1;
    self->seg_count += 1;
    self->next_index += 1;
    self->log_size += rec;
    self->last_time = t;
}

static int
reserve_record(Appender *self, Py_ssize_t size)
{
    if (buf_reserve(&self->log, (size_t)RECORD_HEADER_SIZE + (size_t)size) < 0 ||
        buf_reserve(&self->crc, CRC_SIZE) < 0 || buf_reserve(&self->idx, ENTRY_SIZE) < 0)
        return -1;
    return 0;
}

static PyObject *
Appender_append(Appender *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    /* Anything but append(bytes[, int[, int|None]]) positionally goes the slow way. */
    if (!self->armed || kwnames != NULL || nargs < 1 || nargs > 3 || !PyBytes_CheckExact(args[0]))
        return call_slow(self, args, nargs, kwnames);
    PyObject *data = args[0];
    unsigned long long flags = 0;
    if (nargs >= 2) {
        if (!PyLong_CheckExact(args[1]))
            return call_slow(self, args, nargs, kwnames);
        flags = PyLong_AsUnsignedLongLong(args[1]);
        if (flags == (unsigned long long)-1 && PyErr_Occurred()) { /* negative or huge */
            PyErr_Clear();
            return call_slow(self, args, nargs, kwnames);
        }
        if (flags > MAX_FLAGS)
            return call_slow(self, args, nargs, kwnames);
    }
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    if ((unsigned long long)size > MAX_RECORD_SIZE)
        return call_slow(self, args, nargs, kwnames);
    long long t;
    if (nargs < 3 || args[2] == Py_None) {
        struct timespec ts;
        if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
            return call_slow(self, args, nargs, kwnames);
        t = (long long)ts.tv_sec * 1000000000LL + (long long)ts.tv_nsec;
        if (t < self->last_time) /* the clock stepped back: times never do */
            t = self->last_time;
    }
    else {
        if (!PyLong_CheckExact(args[2]))
            return call_slow(self, args, nargs, kwnames);
        int overflow = 0;
        t = PyLong_AsLongLongAndOverflow(args[2], &overflow);
        if (overflow || (t == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return call_slow(self, args, nargs, kwnames);
        }
        if (t < self->last_time) /* the slow path raises the reference's error */
            return call_slow(self, args, nargs, kwnames);
    }
    long long offset = self->log_size;
    long long rec = RECORD_HEADER_SIZE + (long long)size;
    if (offset > LLONG_MAX - rec)
        return call_slow(self, args, nargs, kwnames);
    long long end = offset + rec;
    /* A record that needs a new segment, or a full buffer: the slow path rolls or flushes. */
    if ((end > self->segment_bytes && self->seg_count) || (long long)self->log.len >= self->flush_at)
        return call_slow(self, args, nargs, kwnames);
    if (self->next_index < 0 || self->next_index == LLONG_MAX)
        return call_slow(self, args, nargs, kwnames);
    PyObject *result = PyLong_FromLongLong(self->next_index);
    if (result == NULL)
        return NULL;
    if (reserve_record(self, size) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    /* Every check passed and every buffer has room: from here nothing can fail. */
    put_record(self, PyBytes_AS_STRING(data), size, (uint32_t)flags, t);
    if ((long long)self->log.len >= self->flush_at && self->flush != NULL) {
        /* The buffer is full: the writer flushes now, as its own append would
         * (a failure is raised by this call, the record stays appended). */
        PyObject *flush = self->flush;
        Py_INCREF(flush);
        PyObject *done = PyObject_CallNoArgs(flush);
        Py_DECREF(flush);
        if (done == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(done);
    }
    return result;
}

/* extend(items, flags, time_ns, start) -> int: see fastpath.Appender.extend. */
static PyObject *
Appender_extend(Appender *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "extend(items, flags, time_ns, start) takes 4 arguments");
        return NULL;
    }
    PyObject *items = args[0];
    if (!PyList_CheckExact(items)) {
        PyErr_SetString(PyExc_TypeError, "extend: items must be a list");
        return NULL;
    }
    if (!PyLong_CheckExact(args[1]) || !PyLong_CheckExact(args[2]) || !PyLong_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "extend: flags, time_ns and start must be ints");
        return NULL;
    }
    int of1 = 0, of2 = 0, of3 = 0;
    long long flags = PyLong_AsLongLongAndOverflow(args[1], &of1);
    long long t = PyLong_AsLongLongAndOverflow(args[2], &of2);
    long long start = PyLong_AsLongLongAndOverflow(args[3], &of3);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (of1 || of2 || of3 || flags < 0 || (unsigned long long)flags > MAX_FLAGS || t < self->last_time ||
        start < 0 || start > (long long)n) {
        PyErr_SetString(PyExc_ValueError, "extend: flags, time_ns or start out of range");
        return NULL;
    }
    /* Check every item first: a bad one appends nothing. */
    for (Py_ssize_t i = (Py_ssize_t)start; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (!PyBytes_CheckExact(item) || (unsigned long long)PyBytes_GET_SIZE(item) > MAX_RECORD_SIZE) {
            PyErr_Format(PyExc_ValueError, "extend: item %zd is not bytes of at most %llu", i, MAX_RECORD_SIZE);
            return NULL;
        }
    }
    /* No Python code runs below, so the list cannot change under the loop. */
    Py_ssize_t i = (Py_ssize_t)start;
    for (; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        Py_ssize_t size = PyBytes_GET_SIZE(item);
        long long rec = RECORD_HEADER_SIZE + (long long)size;
        if (self->log_size > LLONG_MAX - rec || self->next_index < 0 || self->next_index == LLONG_MAX) {
            PyErr_SetString(PyExc_ValueError, "extend: log offset or index out of range");
            return NULL;
        }
        if (self->log_size + rec > self->segment_bytes && self->seg_count)
            break; /* the caller starts a new segment */
        if (reserve_record(self, size) < 0)
            return NULL;
        put_record(self, PyBytes_AS_STRING(item), size, (uint32_t)flags, t);
    }
    return PyLong_FromSsize_t(i);
}

static PyObject *
Appender_take(Appender *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *first = self->pending ? PyLong_FromLongLong(self->first_time) : Py_NewRef(Py_None);
    if (first == NULL)
        return NULL;
    /* "y#" turns a NULL pointer into None: never-used buffers give b"". */
    PyObject *res = Py_BuildValue(
        "(LNy#y#y#)", self->pending, first, self->log.data ? (const char *)self->log.data : "",
        (Py_ssize_t)self->log.len, self->crc.data ? (const char *)self->crc.data : "", (Py_ssize_t)self->crc.len,
        self->idx.data ? (const char *)self->idx.data : "", (Py_ssize_t)self->idx.len);
    if (res == NULL)
        return NULL;
    self->pending = 0;
    self->log.len = self->crc.len = self->idx.len = 0;
    /* Keep a moderate buffer for the next batch, give back a huge one. */
    if (self->log.cap > (1u << 22)) {
        buf_free(&self->log);
        buf_free(&self->crc);
        buf_free(&self->idx);
    }
    return res;
}

static PyObject *
Appender_crc32(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer view;
    unsigned int start = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32", &view, &start))
        return NULL;
    uint32_t c;
    Py_BEGIN_ALLOW_THREADS
    c = crc_update(start, view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMemberDef Appender_members[] = {
    {"armed", T_BOOL, offsetof(Appender, armed), 0, "whether the fast path may append"},
    {"next_index", T_LONGLONG, offsetof(Appender, next_index), 0, "index of the next record"},
    {"log_size", T_LONGLONG, offsetof(Appender, log_size), 0, "active log size with pending records"},
    {"seg_count", T_LONGLONG, offsetof(Appender, seg_count), 0, "records in the active segment"},
    {"last_time", T_LONGLONG, offsetof(Appender, last_time), 0, "newest record's time"},
    {"segment_bytes", T_LONGLONG, offsetof(Appender, segment_bytes), 0, "segment size limit"},
    {"flush_at", T_LONGLONG, offsetof(Appender, flush_at), 0, "pending log bytes that end the fast path"},
    {"pending", T_LONGLONG, offsetof(Appender, pending), READONLY, "records buffered since take()"},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef Appender_methods[] = {
    {"append", (PyCFunction)(void (*)(void))Appender_append, METH_FASTCALL | METH_KEYWORDS,
     "append(data, flags=0, time_ns=None) -> index; see engine.applog.fastpath.Appender.append"},
    {"extend", (PyCFunction)(void (*)(void))Appender_extend, METH_FASTCALL,
     "extend(items, flags, time_ns, start) -> int; see engine.applog.fastpath.Appender.extend"},
    {"take", (PyCFunction)Appender_take, METH_NOARGS,
     "take() -> (count, first_time, log, crc, idx): the pending records' bytes, cleared"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AppenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.applog._native.Appender",
    .tp_basicsize = sizeof(Appender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Native twin of engine.applog.fastpath.Appender",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Appender_init,
    .tp_dealloc = (destructor)Appender_dealloc,
    .tp_traverse = (traverseproc)Appender_traverse,
    .tp_clear = (inquiry)Appender_clear,
    .tp_members = Appender_members,
    .tp_methods = Appender_methods,
};

static PyMethodDef module_methods[] = {
    {"crc32", Appender_crc32, METH_VARARGS, "crc32(data, start=0): zlib.crc32's value (for the tests)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "engine.applog._native",
    "Native twin of engine.applog.fastpath (see that module).", -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    crc_init();
    if (PyType_Ready(&AppenderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&AppenderType);
    if (PyModule_AddObject(m, "Appender", (PyObject *)&AppenderType) < 0) {
        Py_DECREF(&AppenderType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "RECORD_HEADER_SIZE", RECORD_HEADER_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "ENTRY_SIZE", ENTRY_SIZE) < 0 || PyModule_AddIntConstant(m, "CRC_SIZE", CRC_SIZE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
