/* aioproducer._native.gcutil: let record futures stay out of the cyclic garbage collector.
 *
 * A caller that keeps the future of every record it sends (to await them later, as
 * asyncio.gather users do) keeps hundreds of thousands of them alive. CPython's cyclic
 * GC walks every tracked object in each full collection, and full collections come each
 * time the tracked heap grew by a quarter: a million kept futures cost ~0.4 s of walks,
 * about a sixth of the time such a caller spends sending.
 *
 * A record future is only worth tracking when it can be part of a reference cycle. It
 * refers to its batch, and a batch refers to no record futures (unless interceptors need
 * them), so a future with no callbacks, no cancel message and no error handed out can be
 * in no cycle. CPython untracks tuples and dicts that hold only atoms for the same reason.
 * ``untrack_new(cls)`` makes the objects of a compiled class start untracked;
 * ``track(obj)`` tracks one again (idempotent) when it comes to hold anything more.
 *
 * The same holds for the record batch builders (they refer to buffers and bytes only) and
 * for a batch once it is acknowledged and has let go of its records: the futures callers
 * keep refer to it, and ``untrack(obj)`` takes it out of the walks too.
 *
 * ``untracked_tuple(cls, *items)`` makes the metadata of an acknowledged record: an
 * instance of a named tuple class (RecordMetadata) holding ``items``, made
 * in one step and untracked. tuple.__new__(cls, items) takes an iterable, so it builds a
 * plain tuple first and copies it (about 880 instructions per record, against about 280
 * here), and the NamedTuple's own __new__ is a Python function besides. The metadata holds
 * a topic (an exact str) and ints, none of which can lead back to it.
 *
 * Built only with the mypyc-compiled modules (setup.py); aioproducer.futures runs without
 * it, with every future tracked as usual.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *
untracked_alloc(PyTypeObject *type, Py_ssize_t nitems)
{
    PyObject *obj = PyType_GenericAlloc(type, nitems);
    if (obj != NULL) {
        PyObject_GC_UnTrack(obj);
    }
    return obj;
}

static PyObject *
untrack_new(PyObject *module, PyObject *arg)
{
    if (!PyType_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "untrack_new() takes a class");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)arg;
    /* Only a heap type of our own making, allocating the usual way, whose objects may be
     * freed while untracked (every dealloc of a GC type untracks with the safe call). */
    if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || !(type->tp_flags & Py_TPFLAGS_HAVE_GC)) {
        Py_RETURN_FALSE;
    }
    if (type->tp_alloc == untracked_alloc) {
        Py_RETURN_TRUE;
    }
    if (type->tp_alloc != PyType_GenericAlloc) {
        Py_RETURN_FALSE;
    }
    type->tp_alloc = untracked_alloc;
    Py_RETURN_TRUE;
}

static PyObject *
track(PyObject *module, PyObject *obj)
{
    if (PyObject_IS_GC(obj) && !PyObject_GC_IsTracked(obj)) {
        PyObject_GC_Track(obj);
    }
    Py_RETURN_NONE;
}

static PyObject *
untrack(PyObject *module, PyObject *obj)
{
    if (PyObject_IS_GC(obj) && PyObject_GC_IsTracked(obj)) {
        PyObject_GC_UnTrack(obj);
    }
    Py_RETURN_NONE;
}

#ifndef Py_GIL_DISABLED
/* The last class checked, kept alive, and its field count: the check runs once. */
static PyTypeObject *checked_type = NULL;
static Py_ssize_t checked_size = -1;
#endif

/* Whether type is a named tuple class of size fields: a subclass of tuple laid out as tuple
 * (no __dict__, no hidden fields as a struct sequence has), with a _fields tuple of that
 * length, so that its items are all there is to fill. */
static int
named_tuple_of(PyTypeObject *type, Py_ssize_t size)
{
#ifndef Py_GIL_DISABLED
    if (type == checked_type && size == checked_size) {
        return 1;
    }
#endif
    if (type == &PyTuple_Type || !PyType_IsSubtype(type, &PyTuple_Type)
        || !(type->tp_flags & Py_TPFLAGS_HEAPTYPE)
        || type->tp_basicsize != PyTuple_Type.tp_basicsize
        || type->tp_itemsize != PyTuple_Type.tp_itemsize || type->tp_dictoffset != 0) {
        return 0;
    }
    PyObject *fields = PyObject_GetAttrString((PyObject *)type, "_fields");
    if (fields == NULL) {
        PyErr_Clear();
        return 0;
    }
    int fits = PyTuple_Check(fields) && PyTuple_GET_SIZE(fields) == size;
    Py_DECREF(fields);
#ifndef Py_GIL_DISABLED
    if (fits) {
        Py_INCREF(type);
        Py_XDECREF(checked_type);
        checked_type = type;
        checked_size = size;
    }
#endif
    return fits;
}

static PyObject *
untracked_tuple(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyTypeObject *type = nargs >= 1 && PyType_Check(args[0]) ? (PyTypeObject *)args[0] : NULL;
    Py_ssize_t size = nargs - 1;
    if (type == NULL || !named_tuple_of(type, size)) {
        PyErr_SetString(PyExc_TypeError,
                        "untracked_tuple() takes a named tuple class and one item per field");
        return NULL;
    }
    PyObject *obj = type->tp_alloc(type, size);
    if (obj == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        PyObject *item = args[i + 1];
        Py_INCREF(item);
        PyTuple_SET_ITEM(obj, i, item);
    }
#if PY_VERSION_HEX >= 0x030E0000
    /* 3.14 caches a tuple's hash in it; zeroed memory would read as a hash of 0. */
    ((PyTupleObject *)obj)->ob_hash = -1;
#endif
    if (PyObject_GC_IsTracked(obj)) {
        PyObject_GC_UnTrack(obj);
    }
    return obj;
}

static PyMethodDef methods[] = {
    {"untrack_new", untrack_new, METH_O,
     "Make the new objects of a class start untracked by the cyclic GC; False if it cannot."},
    {"track", track, METH_O, "Have the cyclic GC track obj (again); no-op if it does."},
    {"untrack", untrack, METH_O,
     "Stop the cyclic GC tracking obj, which must be in no reference cycle; no-op if untracked."},
    {"untracked_tuple", (PyCFunction)(void (*)(void))untracked_tuple, METH_FASTCALL,
     "An instance of the named tuple class cls holding items (one per field), untracked by "
     "the cyclic GC: for items that cannot lead back to it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "aioproducer._native.gcutil",
    "Record futures and metadata out of the cyclic GC until they can be part of a cycle.",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit_gcutil(void)
{
    PyObject *module = PyModule_Create(&module_def);
#ifdef Py_GIL_DISABLED
    /* Free-threaded Python: nothing here needs the GIL. untrack_new changes a class's
     * allocator once, when the class is made; track and untrack change the tracking of an
     * object of the calling thread's; untracked_tuple fills an object it just made. */
    if (module != NULL && PyUnstable_Module_SetGIL(module, Py_MOD_GIL_NOT_USED) < 0) {
        Py_DECREF(module);
        return NULL;
    }
#endif
    return module;
}
