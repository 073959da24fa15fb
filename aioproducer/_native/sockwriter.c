/* aioproducer._native.sockwriter: a broker connection's socket writes, on a native thread.
 *
 * Writing a request to a broker on the same machine costs the writer more than the
 * copy: on loopback the kernel runs the receiving side of TCP in the sender's system
 * call and wakes the broker's thread from it. Measured on a 2-core machine, the write was
 * a fifth of the producer's CPU at 1 KiB records, all of it on the event loop's thread
 * while the other core was mostly idle. A Python thread cannot take it over (it would
 * need the GIL for each write), so this module does it in C.
 *
 * SocketWriter(fd) dup()s the socket and starts a thread that owns the duplicate.
 * write(parts) copies the request's bytes into a new chunk and queues it: no system call
 * on the caller's side while the thread is polling (it does so for ``idle_us`` after its
 * last write, every ``poll_us``), one futex wake when it has gone to sleep. The thread
 * takes whatever is queued and writes it with sendmsg(), in order. The caller holds no
 * Python object in the thread's hands, so the thread never takes the GIL.
 *
 * Closing: close() lets the thread flush what is queued (for up to timeout_ms), then
 * close its descriptor (and first shut down the write side, if asked); abort() makes it
 * drop what is queued. After either, the thread no longer writes to the eventfd. The
 * socket itself closes when both the event loop's descriptor and the thread's duplicate
 * are closed, so the loop may close its transport at once: nothing queued is lost, and
 * the thread never writes to a descriptor number the process may have reused.
 *
 * A failed write (the broker went away) shuts the socket down both ways, so the event
 * loop's reader sees it and fails what is in flight; write() raises from then on.
 * notify_below(n) asks the thread to write to an eventfd the loop watches once the queue
 * holds n bytes or fewer (backpressure: the connection stops taking requests above its
 * high-water mark).
 *
 * The shared state lives outside the Python object, with a reference count of its own
 * (one for the object, one for the thread), so either may go first.
 *
 * Linux only (eventfd, timer slack); setup.py builds it there.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define RUNNING 0
#define CLOSING 1
#define ABORTING 2

#define MAX_IOV 64

typedef struct Chunk {
    struct Chunk *next;
    size_t len;
    size_t off; /* bytes of data already written */
    char data[];
} Chunk;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;            /* the Python object's and the thread's */
    int fd;              /* the thread's duplicate; closed by the thread when it ends */
    int notify_fd;       /* an eventfd of the caller's, or -1 */
    Chunk *head, *tail;  /* queued, not yet taken by the thread */
    size_t pending;      /* bytes queued or being written */
    size_t low_water;
    int notify_armed;
    int state;
    int shutdown_write;  /* on close(): shut down the write side after the flush */
    int waiting;         /* the thread sleeps on cv */
    int error;           /* errno of a failed write */
    int exited;
    long poll_ns;
    long idle_ns;
    int64_t close_deadline; /* on close(): give up on what is left after this */
} Shared;

typedef struct {
    PyObject_HEAD
    Shared *s;
} SocketWriter;

static void
free_chunks(Chunk *c)
{
    while (c != NULL) {
        Chunk *next = c->next;
        free(c);
        c = next;
    }
}

/* Drop one reference; the last one frees. Called without the lock held. */
static void
release_shared(Shared *s)
{
    pthread_mutex_lock(&s->mu);
    int left = --s->refs;
    pthread_mutex_unlock(&s->mu);
    if (left == 0) {
        free_chunks(s->head);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
    }
}

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
notify(Shared *s)
{
    /* Called with the lock held. */
    if (s->notify_fd >= 0) {
        uint64_t one = 1;
        ssize_t r = write(s->notify_fd, &one, sizeof(one));
        (void)r; /* a full eventfd counter already wakes the reader */
    }
}

/* Write the chunks of `list` in order; returns 0, or the errno of a failed write. Gives
 * up on a full socket (returning ETIMEDOUT) once aborted, or once a close's time is up.
 * `written` gets the bytes written. */
static int
write_all(Shared *s, Chunk *list, size_t *written)
{
    struct iovec iov[MAX_IOV];
    Chunk *c = list;
    *written = 0;
    while (c != NULL) {
        if (c != list) {
            /* Between writes of a long queue: abort() drops the rest. */
            pthread_mutex_lock(&s->mu);
            int aborting = s->state == ABORTING;
            pthread_mutex_unlock(&s->mu);
            if (aborting) {
                return ETIMEDOUT;
            }
        }
        int n = 0;
        for (Chunk *d = c; d != NULL && n < MAX_IOV; d = d->next, n++) {
            iov[n].iov_base = d->data + d->off;
            iov[n].iov_len = d->len - d->off;
        }
        struct msghdr msg;
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)n;
        /* sendmsg() rather than writev(): MSG_NOSIGNAL, in case SIGPIPE is not ignored. */
        ssize_t w = sendmsg(s->fd, &msg, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                /* The socket's send buffer is full: wait for room, looking at the state
                 * now and then so abort() is not kept waiting. */
                struct pollfd p = {s->fd, POLLOUT, 0};
                poll(&p, 1, 5);
                pthread_mutex_lock(&s->mu);
                int give_up = s->state == ABORTING ||
                              (s->state == CLOSING && now_ns() > s->close_deadline);
                pthread_mutex_unlock(&s->mu);
                if (give_up) {
                    return ETIMEDOUT;
                }
                continue;
            }
            return errno;
        }
        *written += (size_t)w;
        size_t left = (size_t)w;
        while (c != NULL && (left > 0 || c->off == c->len)) {
            size_t rest = c->len - c->off;
            if (left >= rest) {
                left -= rest;
                c->off = c->len;
                c = c->next;
            }
            else {
                c->off += left;
                left = 0;
            }
        }
    }
    return 0;
}

static void *
run(void *arg)
{
    Shared *s = (Shared *)arg;
#ifdef PR_SET_TIMERSLACK
    /* Poll sleeps of tens of microseconds: the default 50 us slack would double them. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
    int64_t last_work = now_ns();
    int err = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->state == ABORTING) {
            break;
        }
        if (s->head == NULL) {
            if (s->state == CLOSING) {
                break;
            }
            if (now_ns() - last_work < s->idle_ns) {
                struct timespec pause = {0, s->poll_ns};
                pthread_mutex_unlock(&s->mu);
                nanosleep(&pause, NULL);
                pthread_mutex_lock(&s->mu);
                continue;
            }
            s->waiting = 1;
            pthread_cond_wait(&s->cv, &s->mu);
            s->waiting = 0;
            last_work = now_ns();
            continue;
        }
        Chunk *list = s->head;
        s->head = s->tail = NULL;
        pthread_mutex_unlock(&s->mu);
        size_t written = 0;
        err = write_all(s, list, &written);
        free_chunks(list);
        last_work = now_ns();
        pthread_mutex_lock(&s->mu);
        s->pending -= written <= s->pending ? written : s->pending;
        if (err != 0) {
            if (s->state == ABORTING) {
                err = 0; /* stopped on purpose, not a failed write */
            }
            else {
                s->error = err;
            }
            break;
        }
        if (s->notify_armed && s->pending <= s->low_water) {
            s->notify_armed = 0;
            notify(s);
        }
    }
    /* Ending: the lock is held. */
    if (err != 0) {
        /* The event loop's reader sees the shutdown and fails what is in flight. */
        shutdown(s->fd, SHUT_RDWR);
    }
    else if (s->state == CLOSING && s->shutdown_write) {
        shutdown(s->fd, SHUT_WR);
    }
    free_chunks(s->head);
    s->head = s->tail = NULL;
    s->pending = 0;
    close(s->fd);
    s->fd = -1;
    s->exited = 1;
    if (s->notify_armed || err != 0) {
        s->notify_armed = 0;
        notify(s);
    }
    pthread_mutex_unlock(&s->mu);
    release_shared(s);
    return NULL;
}

static void
stop(Shared *s, int state, int shutdown_write, int64_t close_timeout_ns)
{
    pthread_mutex_lock(&s->mu);
    if (s->state == RUNNING || (s->state == CLOSING && state == ABORTING)) {
        s->state = state;
        s->shutdown_write = shutdown_write;
        s->close_deadline = now_ns() + close_timeout_ns;
        pthread_cond_signal(&s->cv);
    }
    /* The caller may close its eventfd as soon as this returns: never write to it again. */
    s->notify_fd = -1;
    s->notify_armed = 0;
    pthread_mutex_unlock(&s->mu);
}

static int
SocketWriter_init(SocketWriter *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fd", "notify_fd", "poll_us", "idle_us", NULL};
    int fd;
    int notify_fd = -1;
    long poll_us = 50;
    long idle_us = 300;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|ill", kwlist, &fd, &notify_fd, &poll_us,
                                     &idle_us)) {
        return -1;
    }
    if (self->s != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "SocketWriter is already started");
        return -1;
    }
    if (poll_us < 1 || poll_us > 999999 || idle_us < 0 || idle_us > 60000000) {
        PyErr_SetString(PyExc_ValueError, "poll_us must be 1-999999 and idle_us 0-60000000");
        return -1;
    }
    Shared *s = calloc(1, sizeof(Shared));
    if (s == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (s->fd < 0) {
        free(s);
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->refs = 2;
    s->notify_fd = notify_fd;
    s->poll_ns = poll_us * 1000;
    s->idle_ns = idle_us * 1000;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    /* The thread starts with every signal blocked (it inherits the mask), so signals keep
     * going to the threads Python expects them on. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&thread, &attr, run, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        close(s->fd);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->s = s;
    return 0;
}

static void
SocketWriter_dealloc(SocketWriter *self)
{
    Shared *s = self->s;
    if (s != NULL) {
        self->s = NULL;
        /* Dropped without close() or abort(): nobody can queue more, so flush what is
         * queued as close() would. After close() this leaves the flush to finish. */
        pthread_mutex_lock(&s->mu);
        int running = s->state == RUNNING;
        pthread_mutex_unlock(&s->mu);
        if (running) {
            stop(s, CLOSING, 0, (int64_t)30000 * 1000000);
        }
        release_shared(s);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Shared *
started(SocketWriter *self)
{
    if (self->s == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "SocketWriter was not initialised");
    }
    return self->s;
}

static PyObject *
SocketWriter_write(SocketWriter *self, PyObject *parts)
{
    Shared *s = started(self);
    if (s == NULL) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(parts, "write() takes a sequence of buffers");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_buffer views[16];
    Py_buffer *bufs = n <= 16 ? views : PyMem_Malloc(sizeof(Py_buffer) * (size_t)n);
    if (bufs == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    size_t total = 0;
    Py_ssize_t got = 0;
    PyObject *result = NULL;
    for (; got < n; got++) {
        /* For a list, PySequence_Fast returns the list itself, and exporting an item's
         * buffer may run Python code (a __buffer__ method) that changes the list: read the
         * list again at each step, and hold a reference to the item while it exports (the
         * exported view then holds its own). */
        if (got >= PySequence_Fast_GET_SIZE(seq)) {
            PyErr_SetString(PyExc_RuntimeError, "write(): the sequence changed size");
            goto done;
        }
        PyObject *item = PySequence_Fast_GET_ITEM(seq, got);
        Py_INCREF(item);
        int exported = PyObject_GetBuffer(item, &bufs[got], PyBUF_SIMPLE);
        Py_DECREF(item);
        if (exported < 0) {
            goto done;
        }
        total += (size_t)bufs[got].len;
    }
    Chunk *chunk = malloc(sizeof(Chunk) + (total ? total : 1));
    if (chunk == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    chunk->next = NULL;
    chunk->len = total;
    chunk->off = 0;
    size_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(chunk->data + at, bufs[i].buf, (size_t)bufs[i].len);
        at += (size_t)bufs[i].len;
    }
    pthread_mutex_lock(&s->mu);
    if (s->error != 0 || s->state != RUNNING) {
        int error = s->error;
        pthread_mutex_unlock(&s->mu);
        free(chunk);
        if (error != 0) {
            errno = error;
            PyErr_SetFromErrno(PyExc_OSError);
        }
        else {
            PyErr_SetString(PyExc_ConnectionError, "the socket writer is closed");
        }
        goto done;
    }
    if (s->tail != NULL) {
        s->tail->next = chunk;
    }
    else {
        s->head = chunk;
    }
    s->tail = chunk;
    s->pending += total;
    size_t pending = s->pending;
    if (s->waiting) {
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    result = PyLong_FromSize_t(pending);
done:
    for (Py_ssize_t i = 0; i < got; i++) {
        PyBuffer_Release(&bufs[i]);
    }
    if (bufs != views) {
        PyMem_Free(bufs);
    }
    Py_DECREF(seq);
    return result;
}

static PyObject *
SocketWriter_notify_below(SocketWriter *self, PyObject *arg)
{
    Shared *s = started(self);
    if (s == NULL) {
        return NULL;
    }
    Py_ssize_t low = PyLong_AsSsize_t(arg);
    if (low < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "notify_below() takes a byte count >= 0");
        }
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    int below = s->pending <= (size_t)low || s->exited;
    if (!below) {
        s->low_water = (size_t)low;
        s->notify_armed = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return PyBool_FromLong(below);
}

static PyObject *
SocketWriter_close(SocketWriter *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"shutdown_write", "timeout_ms", NULL};
    int shutdown_write = 0;
    long timeout_ms = 30000;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pl", kwlist, &shutdown_write, &timeout_ms)) {
        return NULL;
    }
    if (timeout_ms < 0 || timeout_ms > 86400000) {
        PyErr_SetString(PyExc_ValueError, "timeout_ms must be 0-86400000");
        return NULL;
    }
    Shared *s = started(self);
    if (s == NULL) {
        return NULL;
    }
    stop(s, CLOSING, shutdown_write, (int64_t)timeout_ms * 1000000);
    Py_RETURN_NONE;
}

static PyObject *
SocketWriter_abort(SocketWriter *self, PyObject *unused)
{
    Shared *s = started(self);
    if (s == NULL) {
        return NULL;
    }
    stop(s, ABORTING, 0, 0);
    Py_RETURN_NONE;
}

static PyObject *
SocketWriter_get_pending(SocketWriter *self, void *closure)
{
    Shared *s = started(self);
    if (s == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    size_t pending = s->pending;
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromSize_t(pending);
}

static PyObject *
SocketWriter_get_error(SocketWriter *self, void *closure)
{
    Shared *s = started(self);
    if (s == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    int error = s->error;
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromLong(error);
}

static PyObject *
SocketWriter_get_exited(SocketWriter *self, void *closure)
{
    Shared *s = started(self);
    if (s == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    int exited = s->exited;
    pthread_mutex_unlock(&s->mu);
    return PyBool_FromLong(exited);
}

static PyMethodDef SocketWriter_methods[] = {
    {"write", (PyCFunction)SocketWriter_write, METH_O,
     "Queue a copy of the buffers' bytes; return the bytes queued in all."},
    {"notify_below", (PyCFunction)SocketWriter_notify_below, METH_O,
     "True if at most n bytes are queued; else write to notify_fd once they are."},
    {"close", (PyCFunction)(void (*)(void))SocketWriter_close, METH_VARARGS | METH_KEYWORDS,
     "Write what is queued (for up to timeout_ms), then close; shut down the write side "
     "first if asked."},
    {"abort", (PyCFunction)SocketWriter_abort, METH_NOARGS,
     "Drop what is queued and close."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef SocketWriter_getset[] = {
    {"pending", (getter)SocketWriter_get_pending, NULL, "Bytes queued or being written.", NULL},
    {"error", (getter)SocketWriter_get_error, NULL, "errno of a failed write, or 0.", NULL},
    {"exited", (getter)SocketWriter_get_exited, NULL, "True once the thread has ended.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SocketWriter_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioproducer._native.sockwriter.SocketWriter",
    .tp_basicsize = sizeof(SocketWriter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A socket's writes on a native thread (see the module's source).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SocketWriter_init,
    .tp_dealloc = (destructor)SocketWriter_dealloc,
    .tp_methods = SocketWriter_methods,
    .tp_getset = SocketWriter_getset,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "aioproducer._native.sockwriter",
    "A broker connection's socket writes on a native thread.",
    -1,
    NULL,
};

PyMODINIT_FUNC
PyInit_sockwriter(void)
{
    if (PyType_Ready(&SocketWriter_Type) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&SocketWriter_Type);
    if (PyModule_AddObject(module, "SocketWriter", (PyObject *)&SocketWriter_Type) < 0) {
        Py_DECREF(&SocketWriter_Type);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
