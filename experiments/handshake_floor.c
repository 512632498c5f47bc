/* The floor of a step handshake on this machine: what any implementation, native or not, pays to
 * wake W sleeping worker processes, let each sleep one env step, and learn that all are done.
 *
 * Built and run by experiments/handshake_floor.py (docs/lab/benchmarks.md). It has none of vecsample's
 * work: no Python, no actions or results, no infos. The workers sleep SLEEP_US per batch, as
 * vecsample.testing.SleepEnv does, and U is their time inside that sleep / (W x wall), the same
 * measure as experiments/parent_scaling.py's.
 *
 * Three modes:
 *   flat     full batches; one futex word for all workers, one FUTEX_WAKE_BITSET system call
 *            from the parent per batch (vecsample's Bell);
 *   tree     full batches; each worker waits on its own word; the parent wakes workers 0 and 1,
 *            and worker w, once awake, wakes 2w+2 and 2w+3 before its own step: the parent
 *            makes two wake-ups, the rest are spread over the workers;
 *   partial  partial batches, woken as flat: the parent waits for the first worker to finish,
 *            then up to TIMEOUT_US for more, and posts again to those it received (as
 *            vecsample's step_recv(timeout) loop); U counts the same, us_per_batch is per recv.
 * Both sides spin SPIN_US on the shared words before they sleep on a futex.
 *
 * Usage: handshake_floor W SLEEP_US SECONDS flat|tree|partial SPIN_US [TIMEOUT_US, default 500]
 * Prints: workers mode batches wall_s U us_per_batch parent_cpu_us worker_cpu_us (per batch;
 *         the worker's is each worker's mean)
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 64

struct slot { /* one cache line per worker: no false sharing between workers */
    _Alignas(64) uint32_t seq; /* parent -> worker: the batch posted (the tree's futex word) */
    _Alignas(64) uint32_t done; /* worker -> parent: the last batch it finished */
    uint64_t busy_ns;          /* worker: time inside its sleeps */
    uint64_t cpu_ns;           /* worker: its CPU time at its last finished batch */
};

struct shared {
    _Alignas(64) uint32_t bell;     /* flat: the one futex word every worker waits on */
    _Alignas(64) uint32_t finished; /* workers' completions, all batches (the parent's word) */
    _Alignas(64) uint32_t stop;
    struct slot slots[MAX_WORKERS];
};

static struct shared *sh;
static int workers, tree, partial;
static long spin_ns;

static uint64_t cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t workers_cpu(void) {
    uint64_t sum = 0;
    for (int w = 0; w < workers; w++) sum += sh->slots[w].cpu_ns;
    return sum;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static long futex(uint32_t *word, int op, uint32_t value, uint32_t bits) {
    return syscall(SYS_futex, word, op, value, NULL, NULL, bits);
}

/* Spin up to spin_ns while *word == seen, then sleep on it (flat: on the bell, with our bit). */
static void wait_change(uint32_t *word, uint32_t seen, int w) {
    double end = now() + spin_ns * 1e-9;
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == seen && now() < end)
        sched_yield(); /* as vecsample's spin does: a process that shares our core gets it */
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == seen) {
        if (tree || w < 0) {
            futex(word, FUTEX_WAIT, seen, 0);
        } else {
            uint32_t ring = __atomic_load_n(&sh->bell, __ATOMIC_ACQUIRE);
            if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != seen) break;
            futex(&sh->bell, FUTEX_WAIT_BITSET, ring, 1u << (w % 32));
        }
    }
}

static void wake_worker(int w) {
    if (w < workers) futex(&sh->slots[w].seq, FUTEX_WAKE, 1, 0);
}

static void worker(int w, long sleep_us) {
    uint32_t seen = 0;
    struct timespec nap = {0, sleep_us * 1000};
    for (;;) {
        wait_change(&sh->slots[w].seq, seen, w);
        seen = __atomic_load_n(&sh->slots[w].seq, __ATOMIC_ACQUIRE);
        if (tree) {
            wake_worker(2 * w + 2);
            wake_worker(2 * w + 3);
        }
        if (__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) _exit(0);
        double t0 = now();
        nanosleep(&nap, NULL);
        sh->slots[w].busy_ns += (uint64_t)((now() - t0) * 1e9);
        sh->slots[w].cpu_ns = cpu_now();
        __atomic_store_n(&sh->slots[w].done, seen, __ATOMIC_RELEASE);
        /* Full batches: the last one wakes the parent; partial: each one may be the first. */
        if (__atomic_add_fetch(&sh->finished, 1, __ATOMIC_ACQ_REL) % workers == 0 || partial)
            futex(&sh->finished, FUTEX_WAKE, 1, 0);
    }
}

static void post(uint32_t batch) {
    for (int w = 0; w < workers; w++) __atomic_store_n(&sh->slots[w].seq, batch, __ATOMIC_RELEASE);
    if (tree) {
        wake_worker(0);
        wake_worker(1);
    } else {
        __atomic_add_fetch(&sh->bell, 1, __ATOMIC_ACQ_REL);
        futex(&sh->bell, FUTEX_WAKE_BITSET, INT32_MAX, 0xFFFFFFFFu);
    }
}

static void collect(uint32_t target) {
    uint32_t seen;
    while ((seen = __atomic_load_n(&sh->finished, __ATOMIC_ACQUIRE)) != target)
        wait_change(&sh->finished, seen, -1);
}

/* Partial batches: post to the workers in `idle` (a bitmask), wake them with one ring. */
static void post_some(uint64_t idle) {
    uint32_t bits = 0;
    for (int w = 0; w < workers; w++)
        if (idle >> w & 1) {
            __atomic_add_fetch(&sh->slots[w].seq, 1, __ATOMIC_ACQ_REL);
            bits |= 1u << (w % 32);
        }
    __atomic_add_fetch(&sh->bell, 1, __ATOMIC_ACQ_REL);
    futex(&sh->bell, FUTEX_WAKE_BITSET, INT32_MAX, bits);
}

/* The workers of `pending` whose posted batch is done (a bitmask). */
static uint64_t done_of(uint64_t pending) {
    uint64_t done = 0;
    for (int w = 0; w < workers; w++)
        if ((pending >> w & 1) && __atomic_load_n(&sh->slots[w].done, __ATOMIC_ACQUIRE) ==
                                      __atomic_load_n(&sh->slots[w].seq, __ATOMIC_ACQUIRE))
            done |= 1ull << w;
    return done;
}

/* One partial recv: waits for the first of `pending`, then up to timeout_s for the others. */
static uint64_t recv_partial(uint64_t pending, double timeout_s) {
    uint64_t done;
    uint32_t seen;
    while (!(done = done_of(pending))) {
        seen = __atomic_load_n(&sh->finished, __ATOMIC_ACQUIRE);
        if (done_of(pending)) break;
        wait_change(&sh->finished, seen, -1);
    }
    double end = now() + timeout_s, left;
    while ((done = done_of(pending)) != pending && (left = end - now()) > 0) {
        seen = __atomic_load_n(&sh->finished, __ATOMIC_ACQUIRE);
        if (done_of(pending) != done) continue;
        struct timespec t = {(time_t)left, (long)((left - (time_t)left) * 1e9)};
        syscall(SYS_futex, &sh->finished, FUTEX_WAIT, seen, &t, NULL, 0);
    }
    return done;
}

/* Full batches (flat or tree) for `seconds` after `batch` warm-up ones: the batches run. */
static uint32_t run_full(uint32_t *batch, double seconds, double *wall) {
    uint32_t counted = 0;
    double start = now();
    while ((*wall = now() - start) < seconds) {
        ++*batch, counted++;
        post(*batch);
        collect(*batch * (uint32_t)workers);
    }
    return counted;
}

/* Partial batches for `seconds`: the recvs made. */
static uint32_t run_partial(double seconds, double timeout_s, double *wall) {
    uint32_t counted = 0;
    uint64_t all = workers == 64 ? ~0ull : (1ull << workers) - 1, idle = all, pending = 0;
    double start = now();
    while ((*wall = now() - start) < seconds) {
        post_some(idle);
        pending |= idle;
        idle = recv_partial(pending, timeout_s);
        pending &= ~idle;
        counted++;
    }
    return counted;
}

static int usage(const char *name) {
    fprintf(stderr, "usage: %s W(1..%d) SLEEP_US SECONDS flat|tree|partial SPIN_US [TIMEOUT_US]\n",
            name, MAX_WORKERS);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 6 || argc > 7) return usage(argv[0]);
    workers = atoi(argv[1]);
    long sleep_us = atol(argv[2]);
    double seconds = atof(argv[3]), timeout_s = argc == 7 ? atof(argv[6]) * 1e-6 : 500e-6, wall;
    tree = strcmp(argv[4], "tree") == 0, partial = strcmp(argv[4], "partial") == 0;
    spin_ns = atol(argv[5]) * 1000;
    if (workers < 1 || workers > MAX_WORKERS || (!tree && !partial && strcmp(argv[4], "flat")))
        return usage(argv[0]);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return perror("mmap"), 1;
    memset(sh, 0, sizeof *sh);
    pid_t pids[MAX_WORKERS];
    for (int w = 0; w < workers; w++)
        if ((pids[w] = fork()) == 0) worker(w, sleep_us);
    uint32_t batch = 0, counted;
    for (; batch < 50; batch++) { /* warm-up, full batches: every worker has run and slept */
        post(batch + 1);
        collect((batch + 1) * (uint32_t)workers);
    }
    for (int w = 0; w < workers; w++) sh->slots[w].busy_ns = 0;
    uint64_t parent_cpu = cpu_now(), worker_cpu = workers_cpu(), busy = 0;
    counted = partial ? run_partial(seconds, timeout_s, &wall) : run_full(&batch, seconds, &wall);
    parent_cpu = cpu_now() - parent_cpu;
    worker_cpu = workers_cpu() - worker_cpu;
    for (int w = 0; w < workers; w++) busy += sh->slots[w].busy_ns;
    __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
    for (int w = 0; w < workers; w++) sh->slots[w].seq++; /* every worker sees the stop */
    __atomic_add_fetch(&sh->bell, 1, __ATOMIC_ACQ_REL);
    futex(&sh->bell, FUTEX_WAKE_BITSET, INT32_MAX, 0xFFFFFFFFu);
    for (int w = 0; w < workers; w++) wake_worker(w);
    for (int w = 0; w < workers; w++) waitpid(pids[w], NULL, 0);
    printf("%d %s %u %.3f %.4f %.1f %.1f %.1f\n", workers, argv[4], counted, wall,
           busy * 1e-9 / (workers * wall), wall / counted * 1e6, parent_cpu * 1e-3 / counted,
           worker_cpu * 1e-3 / counted / workers);
    return 0;
}
