/* The step handshake's hot path in C: what vecsample/_wire/handshake.py does in Python, for
 * x86-64 Linux (stores seen in program order; one futex for every sleeping worker).
 *
 * Same control array, same words, same protocol as handshake.py (read its docstring first):
 * the parent bumps a worker's SEQ word to post a step and rings the futex if the worker sleeps;
 * the worker sets DONE to that number when its results are in shared memory and writes to the
 * parent's doorbell pipe if the parent sleeps. A sleeper first announces itself (SLEEPING), then
 * fences, then looks again: with the poster's fence between its write and its read, one of the
 * two always sees the other (Dekker). Both sides sleep at most MAX_SLEEP at a time.
 *
 * What C buys: the parent's post, wake, wait and collect for W workers cost one call each, with
 * the per-worker loops in C, and the waits run with the GIL released (another thread of the
 * trainer runs meanwhile); the worker's wait for its next job and its reply are one call each.
 * Nothing here allocates per step. Everything else (the results, infos, errors, restarts) stays
 * in Python, unchanged: this module replaces only the two ends of the handshake.
 *
 * Signals: a wait runs in slices of at most MAX_SLEEP; between slices (and when poll() is
 * interrupted) it takes the GIL and runs Python's signal handlers, so a Ctrl-C is raised as the
 * Python path raises it, within a slice.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The digest of this file that setup.py passes in (handshake.py compares it with the source
 * beside the build, to decline a build older than its source). */
#ifndef VECSAMPLE_SOURCE_DIGEST
#define VECSAMPLE_SOURCE_DIGEST "unknown"
#endif

#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The layout of handshake.py (kept equal: tests/test_native.py compares them). */
#define CONTROL_WORDS 16
#define SEQ 0
#define DONE 8
#define REPLY 9
#define SLEEPING 10
#define INFO_STEP 11
#define INFO_RESET 12
#define PARENT_SLEEPING 0
#define CLOSING 2
#define SCHEMA 8
#define BELL 12
#define REPLY_PLAIN 0
#define SPIN_BURST 20
#define MAX_SLEEP_NS 50000000LL /* 50 ms */
#define BELL_MASK 0x7FFFFFFF

static inline int64_t load(const int64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void store(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline void fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* A deadline in seconds on time.monotonic()'s clock (CLOCK_MONOTONIC), or None: never. */
static int deadline_arg(PyObject *o, int64_t *out) {
    if (o == Py_None) {
        *out = INT64_MAX;
        return 0;
    }
    double s = PyFloat_AsDouble(o);
    if (s == -1.0 && PyErr_Occurred()) return -1;
    *out = (int64_t)(s * 1e9);
    return 0;
}

/* Bumps the bell (the futex word: its low 32 bits, kept below 2**31) and wakes the sleepers
 * whose bit is in ``bits`` (worker w waits with bit w % 32): one system call for all. */
static void futex_wake_bits(int64_t *word, uint32_t bits) {
    store(word, (load(word) + 1) & BELL_MASK);
    syscall(SYS_futex, (int32_t *)word, FUTEX_WAKE_BITSET, BELL_MASK, NULL, NULL, bits);
}

/* ---- a view of the control array, kept alive as long as the object --------------------------- */

typedef struct {
    Py_buffer view;
    int64_t *words;
    Py_ssize_t rows; /* num_workers + 1 */
} Control;

static int control_open(Control *c, PyObject *buffer, Py_ssize_t workers) {
    if (PyObject_GetBuffer(buffer, &c->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (c->view.len < (workers + 1) * CONTROL_WORDS * 8 || ((uintptr_t)c->view.buf) % 8) {
        PyBuffer_Release(&c->view);
        PyErr_Format(PyExc_ValueError,
                     "the control array must hold %zd rows of %d int64 words, 8-byte aligned; "
                     "got %zd bytes", workers + 1, CONTROL_WORDS, c->view.len);
        return -1;
    }
    c->words = (int64_t *)c->view.buf;
    c->rows = workers + 1;
    return 0;
}

static int64_t *parent_word(Control *c, int word) {
    return c->words + (c->rows - 1) * CONTROL_WORDS + word;
}

/* Runs Python's signal handlers (the GIL held): -1 if one raised (KeyboardInterrupt). */
static int check_signals(void) { return PyErr_CheckSignals(); }

/* ================================ the parent's side ============================================ */

typedef struct {
    PyObject_HEAD
    Control c;
    Py_ssize_t n;
    int64_t *seq;    /* the number of the last step posted to each worker */
    int64_t *expect; /* the step each worker is expected to finish; -1: none in flight */
    int ring_fd;
    int64_t spin_ns;
} Parent;

static void Parent_dealloc(Parent *self) {
    if (self->c.words) PyBuffer_Release(&self->c.view);
    PyMem_Free(self->seq);
    PyMem_Free(self->expect);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Parent_init(Parent *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"control", "num_workers", "ring_fd", "spin_s", NULL};
    PyObject *buffer;
    Py_ssize_t n;
    int ring_fd;
    double spin_s;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Onid", names, &buffer, &n, &ring_fd, &spin_s))
        return -1;
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "num_workers must be at least 1");
        return -1;
    }
    if (control_open(&self->c, buffer, n) < 0) return -1;
    self->n = n;
    self->seq = PyMem_Calloc(n, sizeof(int64_t));
    self->expect = PyMem_Calloc(n, sizeof(int64_t));
    if (!self->seq || !self->expect) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t w = 0; w < n; w++) {
        self->seq[w] = load(self->c.words + w * CONTROL_WORDS + SEQ);
        self->expect[w] = -1;
    }
    self->ring_fd = ring_fd;
    self->spin_ns = (int64_t)(spin_s * 1e9);
    return 0;
}

static int worker_arg(Parent *self, Py_ssize_t w) {
    if (w < 0 || w >= self->n) {
        PyErr_Format(PyExc_IndexError, "worker %zd is not in [0, %zd)", w, self->n);
        return -1;
    }
    return 0;
}

static PyObject *Parent_post(Parent *self, PyObject *arg) {
    Py_ssize_t w = PyLong_AsSsize_t(arg);
    if ((w == -1 && PyErr_Occurred()) || worker_arg(self, w) < 0) return NULL;
    int64_t s = ++self->seq[w];
    self->expect[w] = s;
    store(self->c.words + w * CONTROL_WORDS + SEQ, s);
    Py_RETURN_NONE;
}

static PyObject *Parent_post_all(Parent *self, PyObject *unused) {
    for (Py_ssize_t w = 0; w < self->n; w++) {
        int64_t s = ++self->seq[w];
        self->expect[w] = s;
        store(self->c.words + w * CONTROL_WORDS + SEQ, s);
    }
    Py_RETURN_NONE;
}

/* The workers of ``workers`` (a sequence of ints, or None: all) as a C array; -1 on error. */
static Py_ssize_t worker_list(Parent *self, PyObject *workers, Py_ssize_t *out) {
    if (workers == Py_None) {
        for (Py_ssize_t w = 0; w < self->n; w++) out[w] = w;
        return self->n;
    }
    PyObject *seq = PySequence_Fast(workers, "workers must be a sequence of ints");
    if (!seq) return -1;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    if (k > self->n) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "more workers than the handshake has");
        return -1;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        Py_ssize_t w = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));
        if ((w == -1 && PyErr_Occurred()) || worker_arg(self, w) < 0) {
            Py_DECREF(seq);
            return -1;
        }
        out[i] = w;
    }
    Py_DECREF(seq);
    return k;
}

/* Wakes those of ``workers`` (None: all) that sleep, after a fence: one futex system call. */
static PyObject *Parent_wake(Parent *self, PyObject *workers) {
    Py_ssize_t list[self->n];
    Py_ssize_t k = worker_list(self, workers, list);
    if (k < 0) return NULL;
    fence();
    uint32_t bits = 0;
    for (Py_ssize_t i = 0; i < k; i++)
        if (load(self->c.words + list[i] * CONTROL_WORDS + SLEEPING))
            bits |= 1u << (list[i] % 32);
    if (bits) futex_wake_bits(parent_word(&self->c, BELL), bits);
    return PyBool_FromLong(bits != 0);
}

static int done(Parent *self, Py_ssize_t w) {
    return self->expect[w] >= 0 &&
           load(self->c.words + w * CONTROL_WORDS + DONE) == self->expect[w];
}

static PyObject *Parent_ready(Parent *self, PyObject *workers) {
    Py_ssize_t list[self->n];
    Py_ssize_t k = worker_list(self, workers, list);
    if (k < 0) return NULL;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (!done(self, list[i])) continue;
        PyObject *w = PyLong_FromSsize_t(list[i]);
        if (!w || PyList_Append(out, w) < 0) {
            Py_XDECREF(w);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(w);
    }
    return out;
}

/* How many of the listed workers are done (count), for the waits. */
static Py_ssize_t count_done(Parent *self, const Py_ssize_t *list, Py_ssize_t k) {
    Py_ssize_t c = 0;
    for (Py_ssize_t i = 0; i < k; i++) c += done(self, list[i]);
    return c;
}

static void drain_ring(int fd) {
    char buf[4096];
    while (read(fd, buf, sizeof buf) > 0) {
    }
}

/* What one wait watches: the workers it counts, the fds it polls (the doorbell first, then the
 * workers' death fds), and what it found. */
typedef struct {
    Py_ssize_t *list;
    Py_ssize_t k;
    struct pollfd *pfd;
    Py_ssize_t nfd; /* death fds, after the doorbell at pfd[0] */
    int fired;       /* a death fd polled readable */
    int interrupted; /* 1: poll() got EINTR; 2: a Python signal handler raised */
} Watch;

/* Waits, the GIL released, until ``need`` of the watched workers are done, a death fd fires,
 * the sampler is closing, or ``end`` (ns, CLOCK_MONOTONIC) passes: spins (yielding) until
 * ``spin_end``, then sleeps on the doorbell and the death fds in slices of MAX_SLEEP, running
 * Python's signal handlers between slices (the GIL taken for them). */
static void wait_loop(Parent *self, Watch *w, Py_ssize_t need, int64_t end, int64_t spin_end) {
    int64_t *parent_sleeping = parent_word(&self->c, PARENT_SLEEPING);
    const int64_t *closing = parent_word(&self->c, CLOSING);
    if (spin_end > end) spin_end = end;
    while (count_done(self, w->list, w->k) < need && now_ns() < spin_end && !load(closing))
        sched_yield();
    while (count_done(self, w->list, w->k) < need && !load(closing)) {
        int64_t t = now_ns();
        if (t >= end) break;
        store(parent_sleeping, 1);
        fence();
        if (count_done(self, w->list, w->k) >= need) {
            store(parent_sleeping, 0);
            break;
        }
        int64_t slice = end - t < MAX_SLEEP_NS ? end - t : MAX_SLEEP_NS;
        int got = poll(w->pfd, (nfds_t)(w->nfd + 1), (int)((slice + 999999) / 1000000));
        store(parent_sleeping, 0);
        drain_ring(self->ring_fd);
        for (Py_ssize_t i = 1; i <= w->nfd; i++) w->fired |= (w->pfd[i].revents != 0);
        if (w->fired) break;
        if (got < 0 && errno == EINTR) {
            w->interrupted = 1; /* returns early: the caller looks again, after the handlers */
            break;
        }
        if (got == 0) { /* a slice ended: Python's signal handlers run before the next one */
            PyGILState_STATE gil = PyGILState_Ensure();
            int raised = check_signals();
            PyGILState_Release(gil);
            if (raised < 0) {
                w->interrupted = 2;
                break;
            }
        }
    }
}

/* The fds of ``fds_o`` (a sequence of ints) after the doorbell, in a buffer the caller frees;
 * NULL with an exception set on error. Any number of them (a poll() array on the heap). */
static struct pollfd *poll_fds(Parent *self, PyObject *fds_o, Py_ssize_t *nfd) {
    PyObject *seq = PySequence_Fast(fds_o, "fds must be a sequence of ints");
    if (!seq) return NULL;
    *nfd = PySequence_Fast_GET_SIZE(seq);
    struct pollfd *pfd = PyMem_Malloc((size_t)(*nfd + 1) * sizeof(struct pollfd));
    if (!pfd) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    pfd[0].fd = self->ring_fd;
    pfd[0].events = POLLIN;
    for (Py_ssize_t i = 0; i < *nfd; i++) {
        long fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (fd == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            PyMem_Free(pfd);
            return NULL;
        }
        pfd[i + 1].fd = (int)fd;
        pfd[i + 1].events = POLLIN;
        pfd[i + 1].revents = 0;
    }
    Py_DECREF(seq);
    return pfd;
}

/* The fds of ``w`` that fired, as a list of ints. */
static PyObject *fired_fds(const Watch *w) {
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (Py_ssize_t i = 1; w->fired && i <= w->nfd; i++) {
        if (!w->pfd[i].revents) continue;
        PyObject *fd = PyLong_FromLong(w->pfd[i].fd);
        if (!fd || PyList_Append(out, fd) < 0) {
            Py_XDECREF(fd);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(fd);
    }
    return out;
}

/* wait(workers, need, deadline, fds, window=None) -> fired fds.
 *
 * Returns once ``need`` of ``workers`` (a sequence, or None: every worker with a step in
 * flight) have finished their expected step, one of ``fds`` (a worker process's death signal)
 * is readable, ``deadline`` (time.monotonic() seconds; None: never) has passed, or the sampler
 * is closing (its CLOSING word set by another thread's close(), which also rings the
 * doorbell); the fired fds are returned (empty: none fired). With ``window`` (seconds), a
 * partial batch: once ``need`` are done it goes on until every one of ``workers`` is done or
 * ``window`` has passed since (still within ``deadline``). Spins for spin_s first (yielding
 * the core between looks), then sleeps on the doorbell pipe and the fds in slices of at most
 * MAX_SLEEP, the GIL released throughout. Any number of fds.
 */
static PyObject *Parent_wait(Parent *self, PyObject *args) {
    PyObject *workers, *deadline_o, *fds_o, *window_o = Py_None;
    Py_ssize_t need;
    if (!PyArg_ParseTuple(args, "OnOO|O", &workers, &need, &deadline_o, &fds_o, &window_o))
        return NULL;
    Py_ssize_t *list = PyMem_Malloc((size_t)self->n * sizeof(Py_ssize_t));
    if (!list) return PyErr_NoMemory();
    Watch w = {list, 0, NULL, 0, 0, 0};
    int64_t end, window = -1;
    PyObject *out = NULL;
    if (workers == Py_None) {
        for (Py_ssize_t i = 0; i < self->n; i++)
            if (self->expect[i] >= 0) list[w.k++] = i;
    } else if ((w.k = worker_list(self, workers, list)) < 0) {
        goto done;
    }
    if (deadline_arg(deadline_o, &end) < 0) goto done;
    if (window_o != Py_None) {
        double s = PyFloat_AsDouble(window_o);
        if (s == -1.0 && PyErr_Occurred()) goto done;
        window = s > 0 ? (int64_t)(s * 1e9) : 0;
    }
    if (!(w.pfd = poll_fds(self, fds_o, &w.nfd))) goto done;
    if (need > w.k) need = w.k;

    Py_BEGIN_ALLOW_THREADS
    int64_t spin_end = now_ns() + self->spin_ns;
    wait_loop(self, &w, need, end, spin_end);
    if (window >= 0 && !w.fired && !w.interrupted && count_done(self, list, w.k) >= need &&
        count_done(self, list, w.k) < w.k) {
        int64_t t = now_ns(), until = t + window < end ? t + window : end;
        wait_loop(self, &w, w.k, until, t + self->spin_ns);
    }
    Py_END_ALLOW_THREADS

    if (w.interrupted == 2 || (w.interrupted == 1 && check_signals() < 0)) goto done;
    out = fired_fds(&w);
done:
    PyMem_Free(w.pfd);
    PyMem_Free(list);
    return out;
}

/* post_many(workers): posts the next step to each (a sequence of ints), in one call. */
static PyObject *Parent_post_many(Parent *self, PyObject *workers) {
    Py_ssize_t *list = PyMem_Malloc((size_t)self->n * sizeof(Py_ssize_t));
    if (!list) return PyErr_NoMemory();
    Py_ssize_t k = worker_list(self, workers, list);
    for (Py_ssize_t i = 0; i < k; i++) {
        Py_ssize_t w = list[i];
        int64_t s = ++self->seq[w];
        self->expect[w] = s;
        store(self->c.words + w * CONTROL_WORDS + SEQ, s);
    }
    PyMem_Free(list);
    if (k < 0) return NULL;
    Py_RETURN_NONE;
}

/* received_many(workers): marks the step of each read, in one call. */
static PyObject *Parent_received_many(Parent *self, PyObject *workers) {
    Py_ssize_t *list = PyMem_Malloc((size_t)self->n * sizeof(Py_ssize_t));
    if (!list) return PyErr_NoMemory();
    Py_ssize_t k = worker_list(self, workers, list);
    for (Py_ssize_t i = 0; i < k; i++) self->expect[list[i]] = -1;
    PyMem_Free(list);
    if (k < 0) return NULL;
    Py_RETURN_NONE;
}

/* summary() -> (all_plain, step_bits, reset_bits): over every worker with a finished step,
 * whether each replied plainly (no message on its pipe) and the union of the info columns
 * they wrote. Read after wait() found them done. */
static PyObject *Parent_summary(Parent *self, PyObject *unused) {
    int plain = 1;
    int64_t step_bits = 0, reset_bits = 0;
    for (Py_ssize_t w = 0; w < self->n; w++) {
        const int64_t *row = self->c.words + w * CONTROL_WORDS;
        plain &= load(row + REPLY) == REPLY_PLAIN;
        step_bits |= load(row + INFO_STEP);
        reset_bits |= load(row + INFO_RESET);
    }
    return Py_BuildValue("(OLL)", plain ? Py_True : Py_False, (long long)step_bits,
                         (long long)reset_bits);
}

static PyObject *Parent_received(Parent *self, PyObject *arg) {
    Py_ssize_t w = PyLong_AsSsize_t(arg);
    if ((w == -1 && PyErr_Occurred()) || worker_arg(self, w) < 0) return NULL;
    self->expect[w] = -1;
    return PyLong_FromLongLong(load(self->c.words + w * CONTROL_WORDS + REPLY));
}

static PyObject *Parent_received_all(Parent *self, PyObject *unused) {
    for (Py_ssize_t w = 0; w < self->n; w++) self->expect[w] = -1;
    Py_RETURN_NONE;
}

static PyObject *Parent_reset_worker(Parent *self, PyObject *arg) {
    Py_ssize_t w = PyLong_AsSsize_t(arg);
    if ((w == -1 && PyErr_Occurred()) || worker_arg(self, w) < 0) return NULL;
    int64_t *row = self->c.words + w * CONTROL_WORDS;
    store(row + DONE, self->seq[w]);
    store(row + SLEEPING, 0);
    self->expect[w] = -1;
    Py_RETURN_NONE;
}

static PyObject *Parent_expecting(Parent *self, PyObject *arg) {
    Py_ssize_t w = PyLong_AsSsize_t(arg);
    if ((w == -1 && PyErr_Occurred()) || worker_arg(self, w) < 0) return NULL;
    return PyLong_FromLongLong(self->expect[w]);
}

static PyMethodDef Parent_methods[] = {
    {"post", (PyCFunction)Parent_post, METH_O, "Posts step seq+1 to worker w."},
    {"post_all", (PyCFunction)Parent_post_all, METH_NOARGS, "Posts the next step to all."},
    {"wake", (PyCFunction)Parent_wake, METH_O,
     "Wakes those of the workers (None: all) that sleep; whether any did."},
    {"ready", (PyCFunction)Parent_ready, METH_O,
     "Those of the workers (None: all) whose expected step is finished."},
    {"wait", (PyCFunction)Parent_wait, METH_VARARGS,
     "wait(workers, need, deadline, fds, window=None) -> fired fds (see the C source)."},
    {"post_many", (PyCFunction)Parent_post_many, METH_O, "Posts the next step to each worker."},
    {"received_many", (PyCFunction)Parent_received_many, METH_O,
     "Marks the step of each worker read."},
    {"summary", (PyCFunction)Parent_summary, METH_NOARGS,
     "(all plain, step info bits, reset info bits) of every worker's last reply."},
    {"received", (PyCFunction)Parent_received, METH_O,
     "Marks worker w's step read; its reply kind."},
    {"received_all", (PyCFunction)Parent_received_all, METH_NOARGS,
     "Marks every worker's step read."},
    {"reset_worker", (PyCFunction)Parent_reset_worker, METH_O,
     "Before a restart: nothing in flight for worker w."},
    {"expecting", (PyCFunction)Parent_expecting, METH_O,
     "The step worker w is expected to finish (-1: none)."},
    {NULL}};

static PyTypeObject ParentType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "vecsample._wire._native.Parent",
    .tp_basicsize = sizeof(Parent),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The parent's end of the step handshake (handshake.ParentSide's hot path).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Parent_init,
    .tp_dealloc = (destructor)Parent_dealloc,
    .tp_methods = Parent_methods,
};

/* ================================ a worker's side ============================================== */

#define MAX_SLOTS 2 /* a process serves one slot, or two with pipeline=True */

typedef struct {
    PyObject_HEAD
    Control c;
    Py_ssize_t slots[MAX_SLOTS]; /* the control rows of the slots this process serves */
    int pipes[MAX_SLOTS];        /* each slot's pipe, where commands come */
    int live[MAX_SLOTS];         /* slots not closed yet */
    int64_t seen[MAX_SLOTS];     /* the number of the last step taken, per slot */
    Py_ssize_t k;
    int ring_fd;
    int64_t spin_ns;
    uint32_t bits;
} Worker;

static void Worker_dealloc(Worker *self) {
    if (self->c.words) PyBuffer_Release(&self->c.view);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Worker_init(Worker *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"control", "num_workers", "slots", "pipes", "ring_fd", "spin_s",
                            NULL};
    PyObject *buffer, *slots_o, *pipes_o;
    Py_ssize_t n;
    int ring_fd;
    double spin_s;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OnOOid", names, &buffer, &n, &slots_o, &pipes_o,
                                     &ring_fd, &spin_s))
        return -1;
    PyObject *slots = PySequence_Fast(slots_o, "slots must be a sequence of ints");
    if (!slots) return -1;
    PyObject *pipes = PySequence_Fast(pipes_o, "pipes must be a sequence of ints");
    if (!pipes) {
        Py_DECREF(slots);
        return -1;
    }
    Py_ssize_t k = PySequence_Fast_GET_SIZE(slots);
    int bad = k < 1 || k > MAX_SLOTS || PySequence_Fast_GET_SIZE(pipes) != k;
    for (Py_ssize_t i = 0; !bad && i < k; i++) {
        self->slots[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(slots, i));
        self->pipes[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(pipes, i));
        bad = PyErr_Occurred() || self->slots[i] < 0 || self->slots[i] >= n;
    }
    Py_DECREF(slots);
    Py_DECREF(pipes);
    if (bad) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "1 to %d slots in [0, %zd), one pipe each", MAX_SLOTS,
                         n);
        return -1;
    }
    if (control_open(&self->c, buffer, n) < 0) return -1;
    self->k = k;
    self->bits = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        self->live[i] = 1;
        /* a restarted worker starts where it finds SEQ */
        self->seen[i] = load(self->c.words + self->slots[i] * CONTROL_WORDS + SEQ);
        self->bits |= 1u << (self->slots[i] % 32);
    }
    self->ring_fd = ring_fd;
    self->spin_ns = (int64_t)(spin_s * 1e9);
    return 0;
}

/* The slot index (0..k-1) with a newly posted step, or -1; takes it as seen. */
static int take_posted(Worker *self) {
    for (Py_ssize_t i = 0; i < self->k; i++) {
        if (!self->live[i]) continue;
        int64_t s = load(self->c.words + self->slots[i] * CONTROL_WORDS + SEQ);
        if (s != self->seen[i]) {
            self->seen[i] = s;
            return (int)i;
        }
    }
    return -1;
}

/* The slot index whose pipe has something to read (a command, a doorbell, or EOF), or -1. */
static int readable_pipe(Worker *self) {
    struct pollfd pfd[MAX_SLOTS];
    int map[MAX_SLOTS], m = 0;
    for (Py_ssize_t i = 0; i < self->k; i++) {
        if (!self->live[i]) continue;
        pfd[m].fd = self->pipes[i];
        pfd[m].events = POLLIN;
        map[m++] = (int)i;
    }
    if (m == 0 || poll(pfd, (nfds_t)m, 0) <= 0) return -1;
    for (int j = 0; j < m; j++)
        if (pfd[j].revents) return map[j];
    return -1;
}

static void mark_sleeping(Worker *self, int64_t value) {
    for (Py_ssize_t i = 0; i < self->k; i++)
        if (self->live[i]) store(self->c.words + self->slots[i] * CONTROL_WORDS + SLEEPING, value);
}

/* next() -> (slot index, posted): a step posted to that slot (True), or something to read on
 * its pipe (False: a command, a doorbell or the parent's EOF; the caller reads it). Spins on
 * the SEQ words for spin_s (looking at the pipes now and then, so that a command is not kept
 * waiting for the spin to end), then sleeps on the futex with every slot's bit, the GIL
 * released throughout. */
static PyObject *Worker_next(Worker *self, PyObject *unused) {
    int slot = -1, posted = 0, interrupted = 0;
    int64_t *bell = self->c.words + (self->c.rows - 1) * CONTROL_WORDS + BELL;
    Py_BEGIN_ALLOW_THREADS
    int64_t end = now_ns() + self->spin_ns;
    for (int turn = 0; self->spin_ns > 0; turn++) {
        for (int b = 0; b < SPIN_BURST && slot < 0; b++) slot = take_posted(self);
        if (slot >= 0) {
            posted = 1;
            break;
        }
        if (turn % 8 == 7 && (slot = readable_pipe(self)) >= 0) break;
        if (now_ns() >= end) break;
        sched_yield();
    }
    if (slot < 0) {
        mark_sleeping(self, 1);
        for (;;) {
            int32_t seen_bell = __atomic_load_n((int32_t *)bell, __ATOMIC_ACQUIRE);
            fence();
            if ((slot = take_posted(self)) >= 0) {
                posted = 1;
                break;
            }
            if ((slot = readable_pipe(self)) >= 0) {
                if ((slot = take_posted(self)) >= 0) posted = 1; /* posted since: its step */
                else slot = readable_pipe(self);
                if (slot >= 0) break;
            }
            struct timespec until;
            int64_t t = now_ns() + MAX_SLEEP_NS;
            until.tv_sec = t / 1000000000LL;
            until.tv_nsec = t % 1000000000LL;
            long r = syscall(SYS_futex, (int32_t *)bell, FUTEX_WAIT_BITSET, seen_bell, &until,
                             NULL, self->bits);
            if (r == -1 && (errno == ENOSYS || errno == EPERM || errno == EINVAL))
                usleep(1000); /* no futex here (a sandbox): look every millisecond */
            if (r == -1 && errno == EINTR) {
                interrupted = 1; /* the worker ignores SIGINT; a handler may still want to run */
            }
            if (interrupted) {
                Py_BLOCK_THREADS
                int raised = check_signals();
                Py_UNBLOCK_THREADS
                interrupted = 0;
                if (raised < 0) {
                    interrupted = 2;
                    break;
                }
            }
        }
        mark_sleeping(self, 0);
    }
    Py_END_ALLOW_THREADS
    if (interrupted == 2) return NULL;
    return Py_BuildValue("(iO)", slot, posted ? Py_True : Py_False);
}

/* finish(slot index, reply, info_step, info_reset): publishes the end of that slot's step (its
 * results already in shared memory) and rings the parent if it sleeps. */
static PyObject *Worker_finish(Worker *self, PyObject *args) {
    int i;
    long long reply, step_bits, reset_bits;
    if (!PyArg_ParseTuple(args, "iLLL", &i, &reply, &step_bits, &reset_bits)) return NULL;
    if (i < 0 || i >= self->k) {
        PyErr_Format(PyExc_IndexError, "slot index %d is not in [0, %zd)", i, self->k);
        return NULL;
    }
    int64_t *row = self->c.words + self->slots[i] * CONTROL_WORDS;
    store(row + INFO_STEP, step_bits);
    store(row + INFO_RESET, reset_bits);
    store(row + REPLY, reply);
    store(row + DONE, self->seen[i]);
    fence();
    if (load(self->c.words + (self->c.rows - 1) * CONTROL_WORDS + PARENT_SLEEPING)) {
        int32_t ring = (int32_t)self->slots[i];
        /* a full pipe already wakes the parent; a broken one has no parent left to wake */
        if (write(self->ring_fd, &ring, sizeof ring) < 0 && errno != EAGAIN && errno != EPIPE)
            return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyObject *Worker_close_slot(Worker *self, PyObject *arg) {
    long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred()) return NULL;
    if (i < 0 || i >= self->k) {
        PyErr_Format(PyExc_IndexError, "slot index %ld is not in [0, %zd)", i, self->k);
        return NULL;
    }
    self->live[i] = 0;
    Py_RETURN_NONE;
}

static PyObject *Worker_live(Worker *self, PyObject *unused) {
    int any = 0;
    for (Py_ssize_t i = 0; i < self->k; i++) any |= self->live[i];
    return PyBool_FromLong(any);
}

static PyObject *Worker_published(Worker *self, PyObject *unused) {
    return PyLong_FromLongLong(load(self->c.words + (self->c.rows - 1) * CONTROL_WORDS + SCHEMA));
}

static PyMethodDef Worker_methods[] = {
    {"next", (PyCFunction)Worker_next, METH_NOARGS,
     "(slot index, posted): the next job of this process's slots."},
    {"finish", (PyCFunction)Worker_finish, METH_VARARGS,
     "finish(slot index, reply, info_step, info_reset): publishes the end of a step."},
    {"close_slot", (PyCFunction)Worker_close_slot, METH_O, "A slot got CLOSE."},
    {"live", (PyCFunction)Worker_live, METH_NOARGS, "Whether any slot is still served."},
    {"published", (PyCFunction)Worker_published, METH_NOARGS,
     "How many info columns the parent has published."},
    {NULL}};

static PyTypeObject WorkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "vecsample._wire._native.Worker",
    .tp_basicsize = sizeof(Worker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A worker process's end of the step handshake (handshake.Waiter's hot path).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Worker_init,
    .tp_dealloc = (destructor)Worker_dealloc,
    .tp_methods = Worker_methods,
};

/* ---- the module --------------------------------------------------------------------------------- */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "vecsample._wire._native",
    "The step handshake's hot path in C (see vecsample/_wire/_native.c).", -1, NULL};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&ParentType) < 0 || PyType_Ready(&WorkerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ParentType);
    Py_INCREF(&WorkerType);
    if (PyModule_AddObject(m, "Parent", (PyObject *)&ParentType) < 0 ||
        PyModule_AddObject(m, "Worker", (PyObject *)&WorkerType) < 0 ||
        PyModule_AddIntConstant(m, "CONTROL_WORDS", CONTROL_WORDS) < 0 ||
        PyModule_AddIntConstant(m, "SEQ", SEQ) < 0 || PyModule_AddIntConstant(m, "DONE", DONE) < 0 ||
        PyModule_AddIntConstant(m, "REPLY", REPLY) < 0 ||
        PyModule_AddIntConstant(m, "SLEEPING", SLEEPING) < 0 ||
        PyModule_AddIntConstant(m, "INFO_STEP", INFO_STEP) < 0 ||
        PyModule_AddIntConstant(m, "INFO_RESET", INFO_RESET) < 0 ||
        PyModule_AddIntConstant(m, "PARENT_SLEEPING", PARENT_SLEEPING) < 0 ||
        PyModule_AddIntConstant(m, "CLOSING", CLOSING) < 0 ||
        PyModule_AddIntConstant(m, "SCHEMA", SCHEMA) < 0 ||
        PyModule_AddIntConstant(m, "BELL", BELL) < 0 ||
        PyModule_AddIntConstant(m, "MAX_SLEEP_MS", (int)(MAX_SLEEP_NS / 1000000)) < 0 ||
        PyModule_AddStringConstant(m, "SOURCE_DIGEST", VECSAMPLE_SOURCE_DIGEST) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
