/* The floor of a step handshake on this machine: what any implementation, native or not, pays to
 * wake W sleeping worker processes, let each sleep one env step, and learn that all are done.
 *
 * Built and run by experiments/handshake_floor.py (docs/lab/benchmarks.md and
 * docs/lab/straggler_model.md). It has none of vecsample's work: no Python, no actions or
 * results, no infos. A worker's block sleeps BLOCK_NS per batch, as the sleep envs of
 * experiments/_straggler_model.py do, and U is the workers' time inside those sleeps /
 * (W x wall), the same measure as parent_scaling.py's.
 *
 * The straggler model (experiments/_straggler_model.py, the same integers and doubles in the same
 * order): measured block K of slot S sleeps BASE x factor(SEED, S, K), with probability P a
 * factor uniform in [1.5, 2], else uniform in [1 - JITTER, 1 + JITTER]; P = JITTER = 0 is the
 * model off (every block sleeps BASE). BASE is BLOCK_NS, halved for a pipelined process's halves.
 * K counts the slot's batches from 0 after the 50 warm-up ones (which sleep BASE).
 *
 * Four modes:
 *   flat     full batches; one futex word for all workers, one FUTEX_WAKE_BITSET system call
 *            from the parent per batch (vecsample's Bell);
 *   tree     full batches; each worker waits on its own word; the parent wakes workers 0 and 1,
 *            and worker w, once awake, wakes 2w+2 and 2w+3 before its own step: the parent
 *            makes two wake-ups, the rest are spread over the workers;
 *   partial  partial batches, woken as flat: the parent waits for the first worker to finish,
 *            then up to TIMEOUT_US for more, and posts again to those it received (as
 *            vecsample's recv_batch(timeout) loop); U counts the same, us_per_batch is per recv;
 *   pipelined  partial batches over two halves per worker process (slots 2w and 2w+1, each
 *            sleeping half the block), received as partial ones: a process steps one half
 *            while the parent waits for, receives and posts again the other
 *            (VecSampler(pipeline=True)).
 * Both sides spin SPIN_US on the shared words before they sleep on a futex.
 *
 * Usage: handshake_floor W BLOCK_NS SECONDS flat|tree|partial|pipelined SPIN_US TIMEOUT_US
 *                        P JITTER SEED
 * Prints: workers mode batches wall_s U us_per_batch parent_cpu_us worker_cpu_us (per batch;
 *         the worker's is each worker process's mean)
 * Usage: handshake_floor schedule BASE_NS P JITTER SEED SLOTS BATCHES
 * Prints: the delays in ns, one line per slot, its BATCHES blocks (what the workers sleep).
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
#define MAX_SLOTS (2 * MAX_WORKERS)
#define WARMUP 50

typedef unsigned __int128 mask; /* a set of slots, up to MAX_SLOTS */

struct slot { /* one cache line per word: no false sharing between slots */
    _Alignas(64) uint32_t seq; /* parent -> worker: the batch posted (the tree's futex word) */
    _Alignas(64) uint32_t done; /* worker -> parent: the last batch it finished */
    uint64_t busy_ns;          /* worker: time inside this slot's sleeps */
    uint64_t cpu_ns;           /* worker: its process's CPU time when this slot last finished */
};

struct shared {
    _Alignas(64) uint32_t bell;     /* flat: the one futex word every worker waits on */
    _Alignas(64) uint32_t finished; /* slots' completions, all batches (the parent's word) */
    _Alignas(64) uint32_t stop;
    struct slot slots[MAX_SLOTS];
};

static struct shared *sh;
static int workers, per = 1, slots, tree, partial; /* per: slots per process (2: pipelined) */
static long spin_ns;

/* --- the straggler model (experiments/_straggler_model.py) --------------------------------- */

static double model_p, model_jitter;
static uint64_t model_seed;

static uint64_t mix(uint64_t z) { /* splitmix64's step */
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unit(uint64_t h) { return (double)(h >> 11) * 0x1.0p-53; }

static long delay_ns(long base_ns, int slot, uint64_t batch) {
    uint64_t h = mix(mix(mix(model_seed) ^ (uint64_t)slot) ^ batch);
    double draw = unit(mix(h)), factor;
    if (unit(h) < model_p)
        factor = 1.5 + (2.0 - 1.5) * draw;
    else
        factor = 1.0 + model_jitter * (2.0 * draw - 1.0);
    return (long)((double)base_ns * factor);
}

/* --- clocks and futexes ------------------------------------------------------------------ */

static uint64_t cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t workers_cpu(void) { /* each process's latest reading, summed */
    uint64_t sum = 0;
    for (int w = 0; w < workers; w++) {
        uint64_t last = 0;
        for (int h = 0; h < per; h++)
            if (sh->slots[w * per + h].cpu_ns > last) last = sh->slots[w * per + h].cpu_ns;
        sum += last;
    }
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

/* The bell's bit of slot s: its process's. */
static uint32_t bit_of(int s) { return 1u << (s / per % 32); }

/* Spin up to spin_ns while *word == seen, then sleep on it. */
static void wait_change(uint32_t *word, uint32_t seen) {
    double end = now() + spin_ns * 1e-9;
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == seen && now() < end)
        sched_yield(); /* as vecsample's spin does: a process that shares our core gets it */
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == seen)
        futex(word, FUTEX_WAIT, seen, 0);
}

/* --- the worker process ------------------------------------------------------------------ */

/* The slot of process w posted and not yet stepped, trying `first` first; -1 if none. */
static int posted(int w, const uint32_t *seen, int first) {
    for (int i = 0; i < per; i++) {
        int h = (first + i) % per;
        if (__atomic_load_n(&sh->slots[w * per + h].seq, __ATOMIC_ACQUIRE) != seen[h]) return h;
    }
    return -1;
}

/* Waits for a post to process w (tree: on its own word; else on the bell, with its bit). */
static int wait_post(int w, const uint32_t *seen, int first) {
    int h;
    if (tree) {
        wait_change(&sh->slots[w].seq, seen[0]);
        return 0;
    }
    double end = now() + spin_ns * 1e-9;
    while ((h = posted(w, seen, first)) < 0 && now() < end) sched_yield();
    while (h < 0) {
        uint32_t ring = __atomic_load_n(&sh->bell, __ATOMIC_ACQUIRE);
        if ((h = posted(w, seen, first)) >= 0) break;
        futex(&sh->bell, FUTEX_WAIT_BITSET, ring, bit_of(w * per));
        h = posted(w, seen, first);
    }
    return h;
}

static void wake_worker(int w) {
    if (w < workers) futex(&sh->slots[w].seq, FUTEX_WAKE, 1, 0);
}

/* One block of slot s, batch `batch` (its seq): the model's delay once warm-up is over. */
static void step(int s, uint32_t batch, long base_ns) {
    long ns = batch > WARMUP ? delay_ns(base_ns, s, batch - WARMUP - 1) : base_ns;
    struct timespec nap = {ns / 1000000000, ns % 1000000000};
    double t0 = now();
    nanosleep(&nap, NULL);
    sh->slots[s].busy_ns += (uint64_t)((now() - t0) * 1e9);
}

static void worker(int w, long block_ns) {
    uint32_t seen[2] = {0, 0};
    int next = 0; /* pipelined: the half to step first when both are posted (they alternate) */
    for (;;) {
        int h = wait_post(w, seen, next), s = w * per + h;
        seen[h] = __atomic_load_n(&sh->slots[s].seq, __ATOMIC_ACQUIRE);
        if (tree) {
            wake_worker(2 * w + 2);
            wake_worker(2 * w + 3);
        }
        if (__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) _exit(0);
        step(s, seen[h], block_ns / per);
        next = (h + 1) % per;
        sh->slots[s].cpu_ns = cpu_now();
        __atomic_store_n(&sh->slots[s].done, seen[h], __ATOMIC_RELEASE);
        /* Full batches: the last one wakes the parent; partial: each one may be the first. */
        if (__atomic_add_fetch(&sh->finished, 1, __ATOMIC_ACQ_REL) % slots == 0 || partial)
            futex(&sh->finished, FUTEX_WAKE, 1, 0);
    }
}

/* --- the parent -------------------------------------------------------------------------- */

static void post(uint32_t batch) {
    for (int s = 0; s < slots; s++) __atomic_store_n(&sh->slots[s].seq, batch, __ATOMIC_RELEASE);
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
        wait_change(&sh->finished, seen);
}

/* Partial batches: post to the slots in `idle`, wake their processes with one ring. */
static void post_some(mask idle) {
    uint32_t bits = 0;
    for (int s = 0; s < slots; s++)
        if (idle >> s & 1) {
            __atomic_add_fetch(&sh->slots[s].seq, 1, __ATOMIC_ACQ_REL);
            bits |= bit_of(s);
        }
    __atomic_add_fetch(&sh->bell, 1, __ATOMIC_ACQ_REL);
    futex(&sh->bell, FUTEX_WAKE_BITSET, INT32_MAX, bits);
}

/* The slots of `pending` whose posted batch is done. */
static mask done_of(mask pending) {
    mask done = 0;
    for (int s = 0; s < slots; s++)
        if ((pending >> s & 1) && __atomic_load_n(&sh->slots[s].done, __ATOMIC_ACQUIRE) ==
                                      __atomic_load_n(&sh->slots[s].seq, __ATOMIC_ACQUIRE))
            done |= (mask)1 << s;
    return done;
}

/* One partial recv: waits for the first of `pending`, then up to timeout_s for the others. */
static mask recv_partial(mask pending, double timeout_s) {
    mask done;
    uint32_t seen;
    while (!(done = done_of(pending))) {
        seen = __atomic_load_n(&sh->finished, __ATOMIC_ACQUIRE);
        if (done_of(pending)) break;
        wait_change(&sh->finished, seen);
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
        collect(*batch * (uint32_t)slots);
    }
    return counted;
}

/* Partial batches (partial or pipelined) for `seconds`: the recvs made. */
static uint32_t run_partial(double seconds, double timeout_s, double *wall) {
    uint32_t counted = 0;
    mask all = slots == MAX_SLOTS ? ~(mask)0 : ((mask)1 << slots) - 1, idle = all, pending = 0;
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

/* Stops every worker and reaps it. */
static void stop_all(const pid_t *pids) {
    __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
    for (int s = 0; s < slots; s++) sh->slots[s].seq++; /* every worker sees the stop */
    __atomic_add_fetch(&sh->bell, 1, __ATOMIC_ACQ_REL);
    futex(&sh->bell, FUTEX_WAKE_BITSET, INT32_MAX, 0xFFFFFFFFu);
    for (int w = 0; w < workers; w++) wake_worker(w);
    for (int w = 0; w < workers; w++) waitpid(pids[w], NULL, 0);
}

static void set_model(char **argv) { /* P JITTER SEED */
    model_p = atof(argv[0]), model_jitter = atof(argv[1]);
    model_seed = strtoull(argv[2], NULL, 10);
}

/* `schedule BASE_NS P JITTER SEED SLOTS BATCHES`: the model's delays, one line per slot. */
static int schedule(char **argv) {
    long base_ns = atol(argv[0]);
    set_model(argv + 1);
    int n = atoi(argv[4]), batches = atoi(argv[5]);
    for (int s = 0; s < n; s++)
        for (int k = 0; k < batches; k++)
            printf("%ld%c", delay_ns(base_ns, s, (uint64_t)k), k + 1 < batches ? ' ' : '\n');
    return 0;
}

static int usage(const char *name) {
    fprintf(stderr, "usage: %s W(1..%d) BLOCK_NS SECONDS flat|tree|partial|pipelined SPIN_US "
            "TIMEOUT_US P JITTER SEED\n   or: %s schedule BASE_NS P JITTER SEED SLOTS BATCHES\n",
            name, MAX_WORKERS, name);
    return 2;
}

int main(int argc, char **argv) {
    if (argc == 8 && strcmp(argv[1], "schedule") == 0) return schedule(argv + 2);
    if (argc != 10) return usage(argv[0]);
    workers = atoi(argv[1]);
    long block_ns = atol(argv[2]);
    double seconds = atof(argv[3]), timeout_s = atof(argv[6]) * 1e-6, wall;
    const char *mode = argv[4];
    tree = strcmp(mode, "tree") == 0, per = strcmp(mode, "pipelined") == 0 ? 2 : 1;
    partial = strcmp(mode, "partial") == 0 || per == 2;
    spin_ns = atol(argv[5]) * 1000;
    set_model(argv + 7);
    if (workers < 1 || workers > MAX_WORKERS || (!tree && !partial && strcmp(mode, "flat")))
        return usage(argv[0]);
    slots = workers * per;
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return perror("mmap"), 1;
    memset(sh, 0, sizeof *sh);
    pid_t pids[MAX_WORKERS];
    for (int w = 0; w < workers; w++)
        if ((pids[w] = fork()) == 0) worker(w, block_ns);
    uint32_t batch = 0, counted;
    for (; batch < WARMUP; batch++) { /* warm-up, full batches: every slot has run and slept */
        post(batch + 1);
        collect((batch + 1) * (uint32_t)slots);
    }
    for (int s = 0; s < slots; s++) sh->slots[s].busy_ns = 0;
    uint64_t parent_cpu = cpu_now(), worker_cpu = workers_cpu(), busy = 0;
    counted = partial ? run_partial(seconds, timeout_s, &wall) : run_full(&batch, seconds, &wall);
    parent_cpu = cpu_now() - parent_cpu;
    worker_cpu = workers_cpu() - worker_cpu;
    for (int s = 0; s < slots; s++) busy += sh->slots[s].busy_ns;
    stop_all(pids);
    printf("%d %s %u %.3f %.4f %.1f %.1f %.1f\n", workers, mode, counted, wall,
           busy * 1e-9 / (workers * wall), wall / counted * 1e6, parent_cpu * 1e-3 / counted,
           worker_cpu * 1e-3 / counted / workers);
    return 0;
}
