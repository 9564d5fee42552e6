/* C twins of two pure functions of engine.events:
 *
 * - walk_runs (engine/events/runs.py: walk_runs_py), replay's hot loop;
 * - batch_crcs (engine/events/sums.py: batch_crcs_py), the checksums of a run
 *   of data.crc batches (see the end of this file).
 *
 * Both are pure functions of bytes (and of the data.crc arrays).  The
 * pure-Python walk_runs_py is the reference; this function must return equal
 * results on every input (tests/events/test_events_native.py compares them on
 * random valid, corrupted and hostile input).  It walks the window ``buf`` it
 * is given; when the chain leaves it, it returns RUN_READ with the window to
 * read next, and the Python driver (read_runs_with) reads it through the file
 * system seam and calls again.  It never raises for bad data: like the
 * reference it reports why it stopped, and the Python caller raises the typed
 * error.
 *
 * Data block layout (big-endian, the file journal):
 *   i32 size (24 + payload) | i32 own offset | i32 previous | i32 next
 *   | i64 sequence number | payload (size - 24 bytes)
 *
 * Checksums (sums = (ends, lasts, crcs, checked), data.crc's entries): before a
 * block in [8, ends[-1]) is decoded, its batch k is found by the same bisection
 * as bisect_right; if checked[k] is 0 the batch must lie in the window (else a
 * window from its start to at least its end is read), its CRC-32 without the
 * last block's next field is compared with crcs[k]: checked[k] = 1 when equal,
 * else RUN_SUM (the caller records the failure).
 * Every entry used is checked first: 8 <= start <= last <= end - 24, end <= limit
 * (else ValueError, as the reference), and the CRC reads only [start, end)
 * inside the window.  The arrays' buffers are held only during a lookup (a
 * writer thread may append to them between two calls).
 *
 * Bounds: the window must lie in [0, limit) (base >= 0, base + len <= limit,
 * else ValueError, as the reference); every offset read from the buffer is a
 * signed 32-bit value and every position is computed in long long; a header is read
 * only when rel >= 0 and rel + 24 <= len, a payload only when rel + size <= len
 * with size >= 24.  Arguments from the caller are only compared, except where
 * noted (sequence numbers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 24
/* The constants of engine/events/runs.py. */
#define RUN_DONE 0
#define RUN_MORE 1
#define RUN_BAD 2
#define RUN_LINK 3
#define RUN_SHORT 4
#define ANY_PREVIOUS (-1)
#define DATA_HEADER_SIZE 8

#define RUN_SUM 5
#define RUN_READ 6

#include "crc32.h"

#include "native.h"

/* engine.events.codec.Event (a NamedTuple: a tuple subclass), bound at the
 * first read_runs call (engine/native.h) and checked to be a tuple subclass. */
static PyObject *event_class;
static PyTypeObject *event_type;
static int event_bound;
static const native_ref event_refs[] = {{"Event", &event_class}, {NULL, NULL}};

static int
load_event(void)
{
    if (event_bound)
        return 0;
    if (native_bind(&event_bound, "engine.events.codec", event_refs) < 0)
        return -1;
    if (!PyType_Check(event_class) || !PyType_IsSubtype((PyTypeObject *)event_class, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "engine.events.codec.Event is not a tuple type");
        event_bound = 0;
        return -1;
    }
    event_type = (PyTypeObject *)event_class;
    return 0;
}

static long long
be32(const unsigned char *p)
{
    uint32_t v = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
    return (long long)(int32_t)v;
}

static long long
be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = (v << 8) | (uint64_t)p[i];
    }
    return (long long)(int64_t)v;
}

/* An Event(seq, payload): allocated as tuple.__new__(Event, ...) does for a
 * tuple subclass (tp_alloc with two items), so it is the very same kind of object
 * the reference builds.  Steals nothing; returns a new reference or NULL. */
static PyObject *
make_event(long long seq, const unsigned char *payload, Py_ssize_t n)
{
    PyObject *seq_obj = PyLong_FromLongLong(seq);
    if (seq_obj == NULL) {
        return NULL;
    }
    PyObject *payload_obj = PyBytes_FromStringAndSize((const char *)payload, n);
    if (payload_obj == NULL) {
        Py_DECREF(seq_obj);
        return NULL;
    }
    PyObject *event = event_type->tp_alloc(event_type, 2);
    if (event == NULL) {
        Py_DECREF(seq_obj);
        Py_DECREF(payload_obj);
        return NULL;
    }
    PyTuple_SET_ITEM(event, 0, seq_obj);
    PyTuple_SET_ITEM(event, 1, payload_obj);
    return event;
}

static int64_t q_at(const Py_buffer *b, Py_ssize_t i);

/* ---- the data.crc entries the walker checks (see read_runs_py's ``sums``) ----
 *
 * sums = (ends, lasts, crcs, checked): array('q'), array('q'), array('I'),
 * bytearray.  The buffers are taken only for a lookup or a check and released
 * before read_at runs (Python code: a writer thread may append to the arrays
 * meanwhile, which an exported buffer would refuse).  Every index is checked
 * against the lengths taken with the buffers. */
typedef struct {
    Py_buffer ends, lasts, crcs, checked;
    int held;       /* ends and checked (a lookup) */
    int held_vals;  /* lasts and crcs (a check) */
} Sums;

static void
sums_release(Sums *sm)
{
    if (sm->held) {
        PyBuffer_Release(&sm->ends);
        PyBuffer_Release(&sm->checked);
        sm->held = 0;
    }
    if (sm->held_vals) {
        PyBuffer_Release(&sm->lasts);
        PyBuffer_Release(&sm->crcs);
        sm->held_vals = 0;
    }
}

/* The walk's lookups take only ``ends`` and ``checked`` (most batches a replay
 * meets are checked already); ``lasts`` and ``crcs`` are taken for a check
 * (sums_take_values).  Returns the smaller entry count, or -1 with an exception. */
static Py_ssize_t
sums_take_index(PyObject *sums, Sums *sm)
{
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(sums, 0), &sm->ends, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(sums, 3), &sm->checked, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&sm->ends);
        return -1;
    }
    sm->held = 1;
    Py_ssize_t m = sm->ends.len / 8;
    return sm->checked.len < m ? sm->checked.len : m;
}

static Py_ssize_t
sums_take_values(PyObject *sums, Sums *sm)
{
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(sums, 1), &sm->lasts, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(sums, 2), &sm->crcs, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&sm->lasts);
        return -1;
    }
    sm->held_vals = 1;
    Py_ssize_t m = sm->lasts.len / 8;
    return sm->crcs.len / 4 < m ? sm->crcs.len / 4 : m;
}

/* The entry count of the four arrays, which must be equal (the walker's
 * start, as the reference checks): their lengths alone, no buffer taken (a
 * walk's every call pays this).  -1 with an exception set. */
static Py_ssize_t
sums_count(PyObject *sums)
{
    Py_ssize_t n[4];
    for (int i = 0; i < 4; i++) {
        n[i] = PyObject_Length(PyTuple_GET_ITEM(sums, i));
        if (n[i] < 0)
            return -1;
    }
    if (n[0] != n[3] || n[1] != n[3] || n[2] != n[3]) {
        PyErr_SetString(PyExc_ValueError, "walk_runs: data.crc arrays of different lengths");
        return -1;
    }
    return n[3];
}

/* ``covered`` (the end of the last entry, ends[-1], 0 without entries), taken
 * with the index buffers: held on return (the caller looks up and releases). */
static int
sums_take_covered(PyObject *sums, Sums *sm, long long *covered)
{
    if (sums_take_index(sums, sm) < 0)
        return -1;
    Py_ssize_t ne = sm->ends.len / 8;
    *covered = ne ? q_at(&sm->ends, ne - 1) : 0;
    return 0;
}

static int64_t
q_at(const Py_buffer *b, Py_ssize_t i)
{
    int64_t v;
    memcpy(&v, (const char *)b->buf + i * 8, 8);
    return v;
}

/* bisect.bisect_right(ends, x), the same steps (so the same answer on any input). */
static Py_ssize_t
bisect_ends(const Py_buffer *ends, Py_ssize_t n, long long x)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (x < q_at(ends, mid))
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* The slots of a walk (engine/events/runs.py: W_*). */
enum {
    W_OFFSET, W_PREV, W_EXPECTED, W_WANT, W_BS, W_BE, W_HI, W_LIMIT, W_CAP, W_MAX,
    W_BASE, W_SIZE, W_FRESH, WALK_SLOTS
};
#define SUM_FAILED_BEFORE (-2)

PyDoc_STRVAR(walk_runs_doc,
"walk_runs(buf, walk, events, sums=None) -> status\n"
"--\n\n"
"C twin of engine.events.runs.walk_runs_py (see there): appends the events\n"
"decoded to the list events, stores the state and the status' detail in the\n"
"bytearray walk (13 native int64 slots), and returns the status.");

static PyObject *
walk_runs(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3 && nargs != 4) {
        PyErr_Format(PyExc_TypeError, "walk_runs() takes 3 or 4 positional arguments but %zd were given", nargs);
        return NULL;
    }
    PyObject *buf_obj = args[0], *walk_obj = args[1], *events = args[2];
    PyObject *sums = nargs == 4 ? args[3] : Py_None;
    if (!PyBytes_CheckExact(buf_obj)) {
        PyErr_SetString(PyExc_TypeError, "walk_runs: buf must be bytes");
        return NULL;
    }
    if (!PyByteArray_CheckExact(walk_obj) || PyByteArray_GET_SIZE(walk_obj) != WALK_SLOTS * 8) {
        PyErr_SetString(PyExc_TypeError, "walk_runs: walk must be a bytearray of 104 bytes");
        return NULL;
    }
    if (!PyList_CheckExact(events)) {
        PyErr_SetString(PyExc_TypeError, "walk_runs: events must be a list");
        return NULL;
    }
    /* The walk is copied in here and out at the end (not on an error: then it is
     * as it was, as the reference leaves it), its pointer and size fetched again
     * then: Python code that runs meanwhile (a finalizer during an allocation)
     * cannot leave this function writing through a stale pointer. */
    long long w[WALK_SLOTS];
    memcpy(w, PyByteArray_AS_STRING(walk_obj), sizeof w);
    long long offset = w[W_OFFSET], prev = w[W_PREV], expected = w[W_EXPECTED], want = w[W_WANT];
    long long bs = w[W_BS], be = w[W_BE];
    const long long hi = w[W_HI], limit = w[W_LIMIT], cap = w[W_CAP], events_max = w[W_MAX];
    const long long base = w[W_BASE], fresh = w[W_FRESH];
    long long d0 = 0, d1 = 0, d2 = 0;    /* the status' detail (the window slots out) */
    /* (a count: compared with the list's length, a Py_ssize_t) */
    const Py_ssize_t max_events = events_max < PY_SSIZE_T_MIN ? PY_SSIZE_T_MIN
                                  : events_max > PY_SSIZE_T_MAX ? PY_SSIZE_T_MAX : (Py_ssize_t)events_max;
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(buf_obj);
    const long long blen = (long long)PyBytes_GET_SIZE(buf_obj);
    /* base >= 0 and base + blen <= limit: every position below is then in range. */
    if (base < 0 || (blen && (blen > limit || base > limit - blen))) {
        PyErr_SetString(PyExc_ValueError, "walk_runs: the window is not inside [0, limit)");
        goto error;
    }
    Sums sm = {.held = 0, .held_vals = 0};
    /* ends[-1], taken at the first lookup (have_covered) with the buffers it
     * needs anyway: a walk that never leaves a checked batch takes none. */
    long long covered = 0;
    int have_covered = 0;
    int checking = sums != Py_None;
    if (checking) {
        if (!PyTuple_Check(sums) || PyTuple_GET_SIZE(sums) != 4) {
            PyErr_SetString(PyExc_ValueError, "walk_runs: sums must be (ends, lasts, crcs, checked)");
            goto error;
        }
        if (sums_count(sums) < 0) {
            goto error;
        }
    }
    if (load_event() < 0) {
        goto error;
    }
    long long served = 0;                /* end in buf of the last block decoded from it */
    long long last_size = 0;             /* size of the last block decoded */
    int status;
    long long ps = 0, pe = 0;            /* the unchecked batch a window must cover */
    /* The window answers a RUN_READ: it must hold what was asked for. */
    if (fresh < 0) {
        if (checking) {
            if (sums_take_covered(sums, &sm, &covered) < 0) {
                goto error;
            }
            have_covered = 1;
        }
        if (!(checking && offset >= DATA_HEADER_SIZE && offset < covered)) {
            sums_release(&sm);
            PyErr_SetString(PyExc_ValueError, "walk_runs: fresh -1 without a data.crc batch at offset");
            goto error;
        }
        Py_ssize_t k = bisect_ends(&sm.ends, sm.ends.len / 8, offset);
        long long e = q_at(&sm.ends, k);
        sums_release(&sm);
        if (base + blen < e) {
            status = RUN_SUM;
            d0 = k;
            d1 = -1;
            goto done;
        }
    }
    else if (fresh > 0 && blen < fresh) {
        status = RUN_SHORT;
        d0 = fresh;
        goto done;
    }
    for (;;) {
        long long need = 0;
        if (checking && offset >= DATA_HEADER_SIZE && !(bs <= offset && offset < be)
                && (!have_covered || offset < covered)) {
            Py_ssize_t n = sums_take_index(sums, &sm);
            if (n < 0) {
                goto error;
            }
            if (!have_covered) {
                Py_ssize_t ne = sm.ends.len / 8;
                covered = ne ? q_at(&sm.ends, ne - 1) : 0;
                have_covered = 1;
                if (offset >= covered) {
                    sums_release(&sm);
                    goto lookup_done;
                }
            }
            Py_ssize_t k = bisect_ends(&sm.ends, sm.ends.len / 8, offset);
            if (k >= n) {
                sums_release(&sm);
                PyErr_SetString(PyExc_ValueError, "walk_runs: data.crc entries do not cover their end");
                goto error;
            }
            unsigned char *chk = (unsigned char *)sm.checked.buf;
            int state = chk[k];
            long long s = k ? q_at(&sm.ends, k - 1) : DATA_HEADER_SIZE;
            long long e = q_at(&sm.ends, k);
            long long last = 0;
            int bad = !(DATA_HEADER_SIZE <= s && s <= e - HEADER_SIZE) || e > limit;
            if (!bad && state == 0) {
                Py_ssize_t nv = sums_take_values(sums, &sm);
                if (nv < 0) {
                    sums_release(&sm);
                    goto error;
                }
                if (k >= nv) {
                    sums_release(&sm);
                    PyErr_SetString(PyExc_ValueError, "walk_runs: data.crc entries do not cover their end");
                    goto error;
                }
                last = q_at(&sm.lasts, k);
                bad = !(s <= last && last <= e - HEADER_SIZE);
            }
            if (bad) {
                sums_release(&sm);
                PyErr_Format(PyExc_ValueError, "walk_runs: data.crc entry %zd is not a batch inside [8, %lld)",
                             k, limit);
                goto error;
            }
            if (state == 2) {
                sums_release(&sm);
                status = RUN_SUM;
                d0 = k;
                d1 = SUM_FAILED_BEFORE;
                break;
            }
            if (state == 0) {
                if (s < base || e > base + blen) {
                    need = -1;  /* a window over the batch */
                    ps = s;
                    pe = e;
                }
                else {
                    /* s - base >= 0 and e - base <= blen: inside buf; s <= last, last + 24 <= e */
                    uint32_t c = crc_extend(0, buf + (s - base), (size_t)(last + 12 - s));
                    c = crc_extend(c, buf + (last + 16 - base), (size_t)(e - last - 16));
                    uint32_t want_crc;
                    memcpy(&want_crc, (const char *)sm.crcs.buf + k * 4, 4);
                    if (c != want_crc) {
                        sums_release(&sm);
                        status = RUN_SUM;
                        d0 = k;
                        d1 = (long long)c;
                        break;
                    }
                    chk[k] = 1;
                    bs = s;
                    be = e;
                }
            }
            else {
                bs = s;
                be = e;
            }
            sums_release(&sm);
        }
    lookup_done:
        if (need) {
            /* a window over an unchecked batch: below */
        }
        else if (offset < base || offset - base > blen - HEADER_SIZE) {
            need = HEADER_SIZE;
        }
        else {
            const long long rel = offset - base;
            const unsigned char *h = buf + rel;
            long long size = be32(h);
            long long own = be32(h + 4);
            long long previous = be32(h + 8);
            long long next = be32(h + 12);
            long long seq = be64(h + 16);
            if (own != offset || seq != expected || (previous != prev && prev != ANY_PREVIOUS)
                    || size < HEADER_SIZE || offset + size > limit) {
                status = RUN_BAD;
                d0 = rel;  /* the caller takes buf[rel:rel + 24] (run_detail) */
                break;
            }
            if (size > blen - rel) {
                need = size;
            }
            else {
                PyObject *event = make_event(seq, h + HEADER_SIZE, (Py_ssize_t)(size - HEADER_SIZE));
                if (event == NULL) {
                    goto error;
                }
                int failed = PyList_Append(events, event);
                Py_DECREF(event);
                if (failed) {
                    goto error;
                }
                if (seq >= hi) {
                    status = RUN_DONE;
                    break;
                }
                served = rel + size;
                last_size = size;
                prev = offset;
                offset = next;
                /* seq < hi <= LLONG_MAX here, so seq + 1 cannot overflow. */
                expected = seq + 1;
                if (PyList_GET_SIZE(events) >= max_events) {
                    status = RUN_MORE;
                    break;
                }
                continue;
            }
        }
        /* A new window at offset, holding at least need bytes. */
        if (served) {
            /* Twice what the window served when the run goes on past it, else as much. */
            long long ww = offset == base + served ? 2 * served : served;
            /* (hi - expected + 1) * last_size, saturating: expected <= hi here (a
             * block below hi was just decoded) and 24 <= last_size < 2^31. */
            long long remaining = (expected > 0 || hi < LLONG_MAX + expected) ? hi - expected + 1 : LLONG_MAX;
            long long rest = remaining > LLONG_MAX / last_size ? LLONG_MAX : remaining * last_size;
            if (rest < ww) {
                ww = rest;
            }
            if (cap < ww) {
                ww = cap;
            }
            want = ww;
            served = 0;
        }
        int over = need < 0;
        long long start, stop;
        if (over) {
            /* From the batch's start to at least its end (8 <= ps <= offset < pe <= limit). */
            need = HEADER_SIZE;
            long long ww = want > need ? want : need;
            stop = ww > limit - offset ? limit : offset + ww;
            if (stop < pe) {
                stop = pe;
            }
            start = ps;
        }
        else {
            /* (limit < need first: limit comes from the caller, and limit - need must not overflow) */
            if (offset < DATA_HEADER_SIZE || limit < need || offset > limit - need) {
                status = RUN_LINK;
                d0 = need;
                break;
            }
            long long n = want > need ? want : need;
            if (n > limit - offset) {
                n = limit - offset;
            }
            start = offset;
            stop = offset + n;
            if (bs <= offset && offset < be && stop < be) {
                stop = be;  /* the rest of a checked batch: its blocks are likely this id's run */
            }
        }
        status = RUN_READ;
        d0 = start;
        d1 = stop - start;
        d2 = over ? -1LL : need;
        break;
    }
done:
    w[W_OFFSET] = offset;
    w[W_PREV] = prev;
    w[W_EXPECTED] = expected;
    w[W_WANT] = want;
    w[W_BS] = bs;
    w[W_BE] = be;
    w[W_BASE] = d0;
    w[W_SIZE] = d1;
    w[W_FRESH] = d2;
    if (PyByteArray_GET_SIZE(walk_obj) != WALK_SLOTS * 8) {
        PyErr_SetString(PyExc_TypeError, "walk_runs: walk must be a bytearray of 104 bytes");
        return NULL;
    }
    memcpy(PyByteArray_AS_STRING(walk_obj), w, sizeof w);
    return PyLong_FromLong(status);

error:
    return NULL;
}

/* ---- batch_crcs: CRC-32 of data.crc batches ---------------------------------
 *
 * batch_crcs(buf, base, ends, lasts, i, j) -> bytes: for k in [i, j), the CRC-32
 * (zlib's polynomial, reflected, as zlib.crc32) of batch k's bytes without the 4
 * bytes of its last block's next field, i.e. of buf[s-base : l+12-base] then
 * buf[l+16-base : e-base], where s = ends[k-1] (8 for k == 0), e = ends[k],
 * l = lasts[k]; packed as native-order uint32 (array('I') bytes).  ends and
 * lasts are array('q') buffers (native int64).  Every batch must satisfy
 * base <= s <= l, l + 24 <= e, e - base <= len(buf), else ValueError (as the
 * reference).  All positions are int64; nothing is read outside buf.
 * The CRC-32 itself is crc_extend of engine/crc32.h.
 */

PyDoc_STRVAR(batch_crcs_doc,
"batch_crcs(buf, base, ends, lasts, i, j) -> bytes\n"
"--\n\n"
"C twin of engine.events.sums.batch_crcs_py.");

static PyObject *
batch_crcs(PyObject *self, PyObject *args)
{
    Py_buffer buf, ends, lasts;
    long long base;
    Py_ssize_t i, j;
    PyObject *out = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*Ly*y*nn", &buf, &base, &ends, &lasts, &i, &j))
        return NULL;
    Py_ssize_t n = ends.len / 8;
    if (ends.len % 8 || lasts.len != ends.len || i < 0 || j < i || j > n) {
        PyErr_SetString(PyExc_ValueError, "batch_crcs: bad entry arrays or range");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, (j - i) * 4);
    if (out == NULL)
        goto done;
    {
        const unsigned char *p = (const unsigned char *)buf.buf;
        const char *ep = (const char *)ends.buf, *lp = (const char *)lasts.buf;
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
        for (Py_ssize_t k = i; k < j; k++) {
            int64_t s = DATA_HEADER_SIZE, e, l;
            if (k)
                memcpy(&s, ep + (k - 1) * 8, 8);
            memcpy(&e, ep + k * 8, 8);
            memcpy(&l, lp + k * 8, 8);
            if (s < base || l < s || e - l < HEADER_SIZE || e - base > (int64_t)buf.len) {
                PyErr_Format(PyExc_ValueError, "batch_crcs: batch %zd outside the buffer", k);
                Py_CLEAR(out);
                goto done;
            }
            uint32_t c = crc_extend(0, p + (s - base), (size_t)(l + 12 - s));
            c = crc_extend(c, p + (l + 16 - base), (size_t)(e - l - 16));
            memcpy(o + (k - i) * 4, &c, 4);
        }
    }
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&ends);
    PyBuffer_Release(&lasts);
    return out;
}

static PyMethodDef methods[] = {
    {"walk_runs", (PyCFunction)(void (*)(void))walk_runs, METH_FASTCALL, walk_runs_doc},
    {"batch_crcs", batch_crcs, METH_VARARGS, batch_crcs_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "engine.events._native",
    "C twins of engine.events.runs.read_runs_py (replay's block walker) and "
    "engine.events.sums.batch_crcs_py (data.crc checksums of a run of batches).",
    -1,
    methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    crc_init();
    return PyModule_Create(&module);
}
