/* How a compiled kernel (engine/<store>/_native.c) learns the Python objects it
 * builds or raises: one way for every module.
 *
 * A kernel module imports nothing when it loads (engine/native.py loads it from
 * its file without importing the store's package, which imports the registry:
 * a module init that imported Python code would be a cycle).  The objects it
 * needs -- a NamedTuple class, a codec's exception, a reference function it
 * hands odd input to -- are named once, in a table of native_ref beside the
 * statics that hold them, and fetched from the module that defines them at the
 * kernel's first call by native_bind(); every later call is one test of a flag.
 * Modules whose kernels build only built-in objects (applog, streams) have no
 * table.
 */
#ifndef ENGINE_NATIVE_H
#define ENGINE_NATIVE_H

#include <Python.h>
#include <stdint.h>

typedef struct {
    const char *name; /* an attribute of the module */
    PyObject **slot;  /* where the strong reference is kept (for the process) */
} native_ref;

/* Fetch every ref of ``refs`` (ended by a {NULL, NULL} entry) from the module
 * ``module``, once: 0 when they are (or were already) bound, -1 with the
 * exception set (nothing bound, the next call tries again). */
static int
native_bind(int *bound, const char *module, const native_ref *refs)
{
    if (*bound)
        return 0;
    PyObject *mod = PyImport_ImportModule(module);
    if (mod == NULL)
        return -1;
    const native_ref *r;
    for (r = refs; r->name != NULL; r++) {
        PyObject *value = PyObject_GetAttrString(mod, r->name);
        if (value == NULL)
            break;
        Py_XSETREF(*r->slot, value);
    }
    Py_DECREF(mod);
    if (r->name != NULL) {
        for (const native_ref *u = refs; u != r; u++)
            Py_CLEAR(*u->slot);
        return -1;
    }
    *bound = 1;
    return 0;
}

/* Raise cls(offset, expected, found) (found NULL: no third argument: the class's
 * default), the (offset, expected, found) errors the codecs raise; returns NULL. */
static PyObject *
native_raise(PyObject *cls, long long offset, const char *expected, const char *found)
{
    PyObject *exc;
    if (found == NULL)
        exc = PyObject_CallFunction(cls, "Ls", offset, expected);
    else
        exc = PyObject_CallFunction(cls, "Lss", offset, expected, found);
    if (exc != NULL) {
        PyErr_SetObject(cls, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* Little-endian loads, for the kernels that read the formats' integers. */
static inline uint32_t
le16(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static inline uint32_t
le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t
le64(const unsigned char *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

#endif /* ENGINE_NATIVE_H */
