/* A fault layer below the process, for ggaudit's tests: preloaded (LD_PRELOAD) into a Python process, it
 * corrupts what reads of ONE file deliver on ONE read path, as a storage stack, a VM disk path, a filter
 * driver or bad RAM under the page cache would. tests/fault_support.py compiles it and sets the variables:
 *
 *   FAULT_PATH    the file (matched by st_dev/st_ino of the descriptor, so any spelling of the path matches)
 *   FAULT_ON      buffered (reads of a descriptor without O_DIRECT), direct (with O_DIRECT), mmap (read-only
 *                 mappings), pagecache (buffered and mmap: every path through the page cache), device (the
 *                 device holds other bytes than the page cache, as after a write lost under a still-cached
 *                 file: direct reads get the fault; buffered reads and mappings made after it get it only on
 *                 the pages evicted by posix_fadvise(POSIX_FADV_DONTNEED) on a descriptor of the file, since
 *                 the cache re-filled from the device holds the device's bytes; data faults only)
 *   FAULT_KIND    data faults, on the bytes of each range [o, o + FAULT_LENGTH) for o in FAULT_OFFSET:
 *                   flip (xor FAULT_MASK), zero, fill (FAULT_BYTE), shift (the bytes of o + FAULT_SHIFT);
 *                 request faults (buffered and direct), on a read whose request overlaps a range:
 *                   short (returns only the bytes before the range), stale (delivers the previous request's
 *                   bytes on that path), eio, eintr, eagain, einval (fails with that errno, the buffer
 *                   untouched; einval on the direct path is a filesystem that takes O_DIRECT at open and
 *                   refuses every read, as some FUSE and network filesystems do); on a mapping, eio, eintr
 *                   and eagain fail a process_vm_readv copy out of it (ggaudit's Linux mmap read): eio as
 *                   EFAULT, what the kernel says for a mapped page it cannot read in (a load gets SIGBUS)
 *   FAULT_OFFSET  comma-separated absolute file offsets; FAULT_LENGTH the range length (default 1)
 *   FAULT_TIMES   once, always (default) or a count: how many reads (or mappings) are faulted
 *   FAULT_MIN_LENGTH  only requests of at least this many bytes are faulted (and counted by FAULT_TIMES;
 *                 default 1): a search's large read of a range fails while the row-sized reads of it succeed
 *   FAULT_LOG     optional file: one line per injected fault ("PATH KIND OFFSET LENGTH"), so a test can show
 *                 that the fault fired even when the reader retried past it
 *
 * Reads go through the real system call first (so O_DIRECT alignment rules still hold) and are corrupted
 * after. For device, posix_fadvise and posix_fadvise64 are intercepted: after a DONTNEED that the real call
 * accepts, the pages of the range the kernel no longer holds (mincore says which: it drops only whole pages,
 * whole folios and clean pages) are recorded in a small table (full: exit 86), and stay the device's for the
 * rest of the process. A test that wants a page dropped writes the file page by page (no large folio) and
 * fsyncs it. A mapping of the file becomes a private copy-on-write mapping whose faulted pages are patched, so
 * pages outside the ranges stay the page cache's. A bad setting ends the process (exit 86): a layer that
 * silently does nothing would make a test pass that should not.
 *
 * Two faults at once: compiled with -DFAULT_PREFIX='"FAULT2_"' the layer reads FAULT2_PATH, FAULT2_ON, ...
 * instead; both copies preloaded stack (each calls the next one's read functions), the second one's faults
 * applied below the first one's. The first copy's own reads of the file (shift's bytes) pass through it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef FAULT_PREFIX
#define FAULT_PREFIX "FAULT_"
#endif

enum { BUFFERED = 1, DIRECT = 2, MAPPED = 4 };
enum kind { FLIP, ZERO, FILL, SHIFT, SHORT, STALE, FAIL_EIO, FAIL_EINTR, FAIL_EAGAIN, FAIL_EINVAL };
static const char *const KINDS[] = {"flip",  "zero", "fill",   "shift", "short",
                                    "stale", "eio",  "eintr", "eagain", "einval"};
#define MAX_OFFSETS 16

static struct {
    int on; /* which read paths (BUFFERED | DIRECT | MAPPED); 0: the layer is off */
    dev_t dev;
    ino_t ino;
    enum kind kind;
    long long offsets[MAX_OFFSETS];
    int n_offsets;
    long long length, shift;
    long long min_length; /* requests shorter than this are never faulted */
    unsigned char mask, byte;
    long times;   /* faults left to inject; -1: always */
    int clean_fd; /* the file opened by the layer itself, for shift's bytes */
    int log_fd;
    int device; /* FAULT_ON=device: buffered reads and mappings see the fault only on evicted pages */
} F = {.log_fd = -1, .clean_fd = -1};

/* device: the evicted byte ranges [lo, hi), page-aligned, disjoint and sorted (merged as they are added). */
#define MAX_EVICTED 256
static struct { long long lo, hi; } evicted[MAX_EVICTED];
static int n_evicted;
static long long PAGE; /* the page size: what the kernel evicts and mincore reports */

/* Guards the fault counter and stale's copy of the previous request (the reader may use threads). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *previous;
static size_t previous_len;

static ssize_t (*real_pread)(int, void *, size_t, off_t);
static ssize_t (*real_pread64)(int, void *, size_t, off64_t);
static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_preadv)(int, const struct iovec *, int, off_t);
static ssize_t (*real_preadv64)(int, const struct iovec *, int, off64_t);
static ssize_t (*real_preadv2)(int, const struct iovec *, int, off_t, int);
static ssize_t (*real_preadv64v2)(int, const struct iovec *, int, off64_t, int);
static void *(*real_mmap64)(void *, size_t, int, int, int, off64_t);
static int (*real_munmap)(void *, size_t);
static ssize_t (*real_vm_readv)(pid_t, const struct iovec *, unsigned long, const struct iovec *, unsigned long,
                                unsigned long);
static int (*real_fadvise)(int, off_t, off_t, int);
static int (*real_fadvise64)(int, off64_t, off64_t, int);

/* For request faults on a mapping: the read-only mappings of the file (address, file offset, length). */
#define MAX_MAPS 16
static struct { unsigned char *at; long long off; size_t len; } maps[MAX_MAPS];

static void die(const char *what, const char *value) {
    fprintf(stderr, "faultlayer: bad %s: %s\n", what, value ? value : "(unset)");
    _exit(86);
}

static long long number(const char *name, const char *text, long long fallback) {
    if (!text || !*text) return fallback;
    char *end;
    long long n = strtoll(text, &end, 0);
    if (*end) die(name, text);
    return n;
}

static void configure(void) {
    const char *path = getenv(FAULT_PREFIX "PATH"), *on = getenv(FAULT_PREFIX "ON");
    const char *kind = getenv(FAULT_PREFIX "KIND");
    const char *times = getenv(FAULT_PREFIX "TIMES"), *log = getenv(FAULT_PREFIX "LOG");
    struct stat st;
    if (!path || !*path) return;
    if (stat(path, &st) != 0) die(FAULT_PREFIX "PATH (cannot stat)", path);
    F.dev = st.st_dev, F.ino = st.st_ino;
    F.kind = (enum kind)(sizeof KINDS / sizeof *KINDS);
    for (size_t i = 0; kind && i < sizeof KINDS / sizeof *KINDS; i++)
        if (strcmp(kind, KINDS[i]) == 0) F.kind = (enum kind)i;
    if (F.kind == sizeof KINDS / sizeof *KINDS) die(FAULT_PREFIX "KIND", kind);
    F.device = on && !strcmp(on, "device");
    int paths = !on ? 0 : !strcmp(on, "buffered") ? BUFFERED : !strcmp(on, "direct") ? DIRECT
              : !strcmp(on, "mmap") ? MAPPED : !strcmp(on, "pagecache") ? BUFFERED | MAPPED
              : F.device ? BUFFERED | DIRECT | MAPPED : 0;
    if (F.device && F.kind > SHIFT) die(FAULT_PREFIX "ON (device takes data faults only)", kind);
    int copy_fault = F.kind == FAIL_EIO || F.kind == FAIL_EINTR || F.kind == FAIL_EAGAIN;
    if (!paths || (F.kind > SHIFT && !copy_fault && (paths & MAPPED)))
        die(FAULT_PREFIX "ON (a mapping takes data faults, eio, eintr and eagain only)", on);
    char *list = strdup(getenv(FAULT_PREFIX "OFFSET") ? getenv(FAULT_PREFIX "OFFSET") : ""), *save = NULL;
    for (char *o = strtok_r(list, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
        if (F.n_offsets == MAX_OFFSETS) die(FAULT_PREFIX "OFFSET (too many)", o);
        F.offsets[F.n_offsets++] = number(FAULT_PREFIX "OFFSET", o, 0);
    }
    free(list);
    if (!F.n_offsets) die(FAULT_PREFIX "OFFSET", getenv(FAULT_PREFIX "OFFSET"));
    F.length = number(FAULT_PREFIX "LENGTH", getenv(FAULT_PREFIX "LENGTH"), 1);
    F.shift = number(FAULT_PREFIX "SHIFT", getenv(FAULT_PREFIX "SHIFT"), 0);
    F.mask = (unsigned char)number(FAULT_PREFIX "MASK", getenv(FAULT_PREFIX "MASK"), 0);
    F.byte = (unsigned char)number(FAULT_PREFIX "BYTE", getenv(FAULT_PREFIX "BYTE"), 0);
    F.min_length = number(FAULT_PREFIX "MIN_LENGTH", getenv(FAULT_PREFIX "MIN_LENGTH"), 1);
    if (F.length < 1 || F.min_length < 1 || (F.kind == FLIP && !F.mask) || (F.kind == SHIFT && !F.shift))
        die(FAULT_PREFIX "LENGTH, FAULT_MASK or FAULT_SHIFT for this kind", kind);
    F.times = !times || !strcmp(times, "always") ? -1
            : !strcmp(times, "once") ? 1 : number(FAULT_PREFIX "TIMES", times, 0);
    if (F.times == 0 || F.times < -1) die(FAULT_PREFIX "TIMES", times);
    if ((F.clean_fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) die(FAULT_PREFIX "PATH (cannot open)", path);
    if (log && *log && (F.log_fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600)) < 0)
        die(FAULT_PREFIX "LOG", log);
    F.on = paths;
}

__attribute__((constructor)) static void init(void) {
    real_pread = dlsym(RTLD_NEXT, "pread");
    real_pread64 = dlsym(RTLD_NEXT, "pread64");
    real_read = dlsym(RTLD_NEXT, "read");
    real_preadv = dlsym(RTLD_NEXT, "preadv");
    real_preadv64 = dlsym(RTLD_NEXT, "preadv64");
    real_preadv2 = dlsym(RTLD_NEXT, "preadv2");
    real_preadv64v2 = dlsym(RTLD_NEXT, "preadv64v2");
    real_mmap64 = dlsym(RTLD_NEXT, "mmap64");
    real_munmap = dlsym(RTLD_NEXT, "munmap");
    real_vm_readv = dlsym(RTLD_NEXT, "process_vm_readv");
    real_fadvise = dlsym(RTLD_NEXT, "posix_fadvise");
    real_fadvise64 = dlsym(RTLD_NEXT, "posix_fadvise64");
    PAGE = sysconf(_SC_PAGESIZE);
    configure();
}

static int is_target(int fd) {
    struct stat st;
    return F.on && fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == F.dev && st.st_ino == F.ino;
}

/* The faulted read path this descriptor's reads take (0: not the file, or not the faulted path). */
static int faulted_path(int fd) {
    if (!is_target(fd)) return 0;
    int flags = fcntl(fd, F_GETFL);
    return (flags >= 0 && (flags & O_DIRECT) ? DIRECT : BUFFERED) & F.on;
}

/* The part of [lo, hi) that reads on *path* see faulted, as [*lo, *hi) (empty: *lo >= *hi). Without device,
 * all of it; with it, direct reads see all of it and the other paths only what lies in the evicted range
 * *k* (called for k = 0 .. n_evicted - 1; the ranges are disjoint, so no byte is faulted twice). */
static int piece(int path, int k, long long *lo, long long *hi) {
    if (!F.device || path == DIRECT) return k == 0 && *lo < *hi;
    if (evicted[k].lo > *lo) *lo = evicted[k].lo;
    if (evicted[k].hi < *hi) *hi = evicted[k].hi;
    return *lo < *hi;
}

/* How many pieces piece() is asked for on this path. */
static int pieces(int path) { return !F.device || path == DIRECT ? 1 : n_evicted; }

/* Whether a read of [at, at + n) on *path* meets a faulted byte. */
static int overlaps(int path, long long at, long long n) {
    pthread_mutex_lock(&lock);
    int yes = 0;
    for (int i = 0; i < F.n_offsets && !yes; i++)
        for (int k = 0; k < pieces(path) && !yes; k++) {
            long long lo = F.offsets[i] > at ? F.offsets[i] : at;
            long long hi = F.offsets[i] + F.length < at + n ? F.offsets[i] + F.length : at + n;
            yes = piece(path, k, &lo, &hi);
        }
    pthread_mutex_unlock(&lock);
    return yes;
}

/* device: record that the pages of [lo, hi) were evicted, merged into the table. */
static void add_evicted(long long lo, long long hi) {
    if (lo >= hi) return;
    pthread_mutex_lock(&lock);
    int k = 0;
    while (k < n_evicted && evicted[k].hi < lo) k++;
    int j = k;
    while (j < n_evicted && evicted[j].lo <= hi) {   /* overlapping or touching: absorbed */
        if (evicted[j].lo < lo) lo = evicted[j].lo;
        if (evicted[j].hi > hi) hi = evicted[j].hi;
        j++;
    }
    if (j == k && n_evicted == MAX_EVICTED) die(FAULT_PREFIX "ON=device (too many evicted ranges)", "fadvise");
    memmove(&evicted[k + 1], &evicted[j], (size_t)(n_evicted - j) * sizeof *evicted);
    evicted[k].lo = lo, evicted[k].hi = hi;
    n_evicted += 1 - (j - k);
    pthread_mutex_unlock(&lock);
}

/* Whether this read (or mapping) gets the fault: FAULT_TIMES counts down, under the lock, only for requests
 * of at least FAULT_MIN_LENGTH bytes. */
static int take_turn(int path, long long at, long long n) {
    if (n < F.min_length) return 0;
    pthread_mutex_lock(&lock);
    int yes = F.times != 0;
    if (F.times > 0) F.times--;
    pthread_mutex_unlock(&lock);
    if (yes && F.log_fd >= 0) {
        const char *name = path == DIRECT ? "direct" : path == MAPPED ? "mmap" : "buffered";
        dprintf(F.log_fd, "%s %s %lld %lld\n", name, KINDS[F.kind], at, n);
    }
    return yes;
}

/* Apply a data fault to *p*, which holds the file's bytes [at, at + n) as read on *path*. */
static void corrupt(int path, unsigned char *p, long long at, long long n) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < F.n_offsets; i++) for (int k = 0; k < pieces(path); k++) {
        long long lo = F.offsets[i] > at ? F.offsets[i] : at;
        long long hi = F.offsets[i] + F.length < at + n ? F.offsets[i] + F.length : at + n;
        if (!piece(path, k, &lo, &hi)) continue;
        unsigned char *q = p + (lo - at);
        if (F.kind == FLIP) for (long long b = 0; b < hi - lo; b++) q[b] ^= F.mask;
        if (F.kind == ZERO || F.kind == FILL) memset(q, F.kind == ZERO ? 0 : F.byte, (size_t)(hi - lo));
        if (F.kind == SHIFT) {
            memset(q, 0, (size_t)(hi - lo)); /* bytes from before the start or past the end read as zeros */
            long long from = lo + F.shift;
            if (from >= 0) real_pread64(F.clean_fd, q, (size_t)(hi - lo), from);
        }
    }
    pthread_mutex_unlock(&lock);
}

static size_t iov_total(const struct iovec *iov, int cnt) {
    size_t n = 0;
    for (int i = 0; i < cnt; i++) n += iov[i].iov_len;
    return n;
}

/* Copy n bytes between *mem* and the buffers from byte *skip* of the request on (into them when *in*). */
static void iov_copy(const struct iovec *iov, int cnt, size_t skip, unsigned char *mem, size_t n, int in) {
    for (int i = 0; i < cnt && n; i++) {
        if (skip >= iov[i].iov_len) { skip -= iov[i].iov_len; continue; }
        size_t k = iov[i].iov_len - skip < n ? iov[i].iov_len - skip : n;
        unsigned char *b = (unsigned char *)iov[i].iov_base + skip;
        memcpy(in ? b : mem, in ? mem : b, k);
        mem += k, n -= k, skip = 0;
    }
}

static ssize_t real_request(int fd, const struct iovec *iov, int cnt, off_t off) {
    return real_preadv64v2 ? real_preadv64v2(fd, iov, cnt, off, 0) : real_preadv64(fd, iov, cnt, off);
}

/* short: the real read, then the bytes from the first faulted one on put back as they were. */
static ssize_t short_read(int fd, const struct iovec *iov, int cnt, off_t off, long long at, size_t want) {
    size_t keep = want;
    for (int i = 0; i < F.n_offsets; i++) {
        size_t before = F.offsets[i] > at ? (size_t)(F.offsets[i] - at) : 0;
        int in_request = F.offsets[i] < at + (long long)want && F.offsets[i] + F.length > at;
        if (in_request && before < keep) keep = before;
    }
    unsigned char *saved = malloc(want - keep + 1);
    if (!saved) { errno = ENOMEM; return -1; }
    iov_copy(iov, cnt, keep, saved, want - keep, 0);
    ssize_t got = real_request(fd, iov, cnt, off);
    if (got > (ssize_t)keep) {
        iov_copy(iov, cnt, keep, saved, want - keep, 1);
        got = (ssize_t)keep;
        if (off < 0) lseek(fd, at + (off_t)keep, SEEK_SET); /* read(): the file position as if it stopped */
    }
    free(saved);
    return got;
}

/* stale: every request on the path is remembered; a faulted one delivers the previous request's bytes. */
static ssize_t stale_read(int fd, const struct iovec *iov, int cnt, off_t off, int hit) {
    pthread_mutex_lock(&lock);
    ssize_t got = real_request(fd, iov, cnt, off);
    if (got > 0) {
        if (hit) iov_copy(iov, cnt, 0, previous, previous_len < (size_t)got ? previous_len : (size_t)got, 1);
        unsigned char *now = malloc((size_t)got);
        if (now) {
            iov_copy(iov, cnt, 0, now, (size_t)got, 0);
            free(previous);
            previous = now, previous_len = (size_t)got;
        }
    }
    pthread_mutex_unlock(&lock);
    return got;
}

/* One read of the faulted file on the faulted path; off < 0 reads at (and moves) the file position. */
static ssize_t faulted(int fd, int path, const struct iovec *iov, int cnt, off_t off) {
    long long at = off >= 0 ? off : lseek(fd, 0, SEEK_CUR);
    size_t want = iov_total(iov, cnt);
    if (F.kind > SHIFT) {
        int hit = overlaps(path, at, (long long)want) && take_turn(path, at, (long long)want);
        if (F.kind == STALE) return stale_read(fd, iov, cnt, off, hit);
        if (!hit) return real_request(fd, iov, cnt, off);
        if (F.kind == SHORT) return short_read(fd, iov, cnt, off, at, want);
        errno = F.kind == FAIL_EIO ? EIO : F.kind == FAIL_EINTR ? EINTR : F.kind == FAIL_EAGAIN ? EAGAIN : EINVAL;
        return -1;
    }
    ssize_t got = real_request(fd, iov, cnt, off);
    if (got > 0 && overlaps(path, at, got) && take_turn(path, at, got)) {
        size_t done = 0;
        for (int i = 0; i < cnt && done < (size_t)got; i++) {
            size_t n = iov[i].iov_len < (size_t)got - done ? iov[i].iov_len : (size_t)got - done;
            corrupt(path, iov[i].iov_base, at + (long long)done, (long long)n);
            done += n;
        }
    }
    return got;
}

#define ONE_BUFFER(fd, buf, n, off, real_call)               \
    int path = faulted_path(fd);                             \
    if (!path) return real_call;                             \
    struct iovec one = {.iov_base = (buf), .iov_len = (n)};  \
    return faulted(fd, path, &one, 1, off)

ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    ONE_BUFFER(fd, buf, n, off, real_pread(fd, buf, n, off));
}
ssize_t pread64(int fd, void *buf, size_t n, off64_t off) {
    ONE_BUFFER(fd, buf, n, off, real_pread64(fd, buf, n, off));
}
ssize_t read(int fd, void *buf, size_t n) {
    ONE_BUFFER(fd, buf, n, -1, real_read(fd, buf, n));
}

#define VECTORS(fd, iov, cnt, off, real_call)                \
    int path = faulted_path(fd);                             \
    return path ? faulted(fd, path, iov, cnt, off) : real_call

ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off) {
    VECTORS(fd, iov, cnt, off, real_preadv(fd, iov, cnt, off));
}
ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off64_t off) {
    VECTORS(fd, iov, cnt, off, real_preadv64(fd, iov, cnt, off));
}
/* preadv2's flags (RWF_HIPRI, RWF_NOWAIT, ...) are dropped on the faulted file: the tests pass none. */
ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) {
    VECTORS(fd, iov, cnt, off, real_preadv2(fd, iov, cnt, off, flags));
}
ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags) {
    VECTORS(fd, iov, cnt, off, real_preadv64v2(fd, iov, cnt, off, flags));
}

/* A read-only mapping of the file overlapping a range: mapped private, the faulted bytes patched in. */
static void *faulted_map(void *addr, size_t len, int prot, int flags, int fd, off64_t off) {
    struct stat st;
    if (!(F.on & MAPPED) || (prot & PROT_WRITE) || !(prot & PROT_READ) || (flags & MAP_ANONYMOUS)
        || !is_target(fd) || fstat(fd, &st) != 0) /* PROT_NONE reads nothing (mincore's and msync's mappings) */
        return real_mmap64(addr, len, prot, flags, fd, off);
    if (F.kind > SHIFT) { /* a request fault: the mapping stays the page cache's; its copies fail */
        void *p = real_mmap64(addr, len, prot, flags, fd, off);
        pthread_mutex_lock(&lock);
        for (int i = 0; p != MAP_FAILED && i < MAX_MAPS; i++)
            if (!maps[i].at) { maps[i].at = p, maps[i].off = off, maps[i].len = len; break; }
        pthread_mutex_unlock(&lock);
        return p;
    }
    long long end = off + (long long)len < st.st_size ? off + (long long)len : st.st_size;
    if (end <= off || !overlaps(MAPPED, off, end - off) || !take_turn(MAPPED, off, end - off))
        return real_mmap64(addr, len, prot, flags, fd, off);
    void *p = real_mmap64(addr, len, prot, (flags & ~MAP_SHARED_VALIDATE) | MAP_PRIVATE, fd, off);
    if (p == MAP_FAILED) return p;
    if (mprotect(p, len, prot | PROT_WRITE) != 0) die("mapping (mprotect failed)", strerror(errno));
    corrupt(MAPPED, p, off, end - off); /* only the pages written become private copies */
    if (mprotect(p, len, prot) != 0) die("mapping (mprotect back failed)", strerror(errno));
    return p;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return faulted_map(addr, len, prot, flags, fd, off);
}
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off) {
    return faulted_map(addr, len, prot, flags, fd, off);
}

int munmap(void *addr, size_t len) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_MAPS; i++)
        if (maps[i].at == addr) maps[i].at = NULL;
    pthread_mutex_unlock(&lock);
    return real_munmap(addr, len);
}

/* A copy out of a mapping of the file (one remote range, as ggaudit's mmap read makes): fails when it overlaps
 * a range. */
ssize_t process_vm_readv(pid_t pid, const struct iovec *local, unsigned long n_local, const struct iovec *remote,
                         unsigned long n_remote, unsigned long flags) {
    if (n_remote == 1 && pid == getpid()) {
        unsigned char *from = remote->iov_base;
        long long at = -1;
        pthread_mutex_lock(&lock);
        for (int i = 0; i < MAX_MAPS; i++)
            if (maps[i].at && from >= maps[i].at && from + remote->iov_len <= maps[i].at + maps[i].len)
                at = maps[i].off + (from - maps[i].at);
        pthread_mutex_unlock(&lock);
        if (at >= 0 && overlaps(MAPPED, at, (long long)remote->iov_len)
            && take_turn(MAPPED, at, (long long)remote->iov_len)) {
            errno = F.kind == FAIL_EIO ? EFAULT : F.kind == FAIL_EINTR ? EINTR : EAGAIN;
            return -1;
        }
    }
    return real_vm_readv(pid, local, n_local, remote, n_remote, flags);
}

/* device: after a DONTNEED the kernel accepted, the pages of the range it names that are not in the page cache
 * (mincore over a mapping of them) are the evicted ones; a page that was not cached before is read from the
 * device all the same. Asking the kernel rather than computing them: it drops only whole pages inside the
 * range (mm/fadvise.c), and only whole folios, so a large folio (a file written in one write()) partly inside
 * the range stays. len 0 means to the end of the file. mincore answers only for a file the process could write
 * or owns (for any other it says every page is resident: nothing would be recorded); tests own their files. */
static int evicting(int fd, long long off, long long len, int advice, int done) {
    struct stat st;
    if (done != 0 || !F.device || advice != POSIX_FADV_DONTNEED || off < 0 || len < 0 || !is_target(fd)
        || fstat(fd, &st) != 0)
        return done;
    long long lo = off / PAGE * PAGE, end = len == 0 || off + len > st.st_size ? st.st_size : off + len;
    size_t pages = end > lo ? (size_t)((end - lo + PAGE - 1) / PAGE) : 0;
    if (!pages) return done;
    unsigned char *vec = malloc(pages);
    void *m = real_mmap64(NULL, pages * PAGE, PROT_NONE, MAP_SHARED, fd, lo);
    if (!vec || m == MAP_FAILED || mincore(m, pages * PAGE, vec) != 0)
        die(FAULT_PREFIX "ON=device (cannot tell which pages were evicted)", strerror(errno));
    real_munmap(m, pages * PAGE);
    for (size_t i = 0, j; i < pages; i = j + 1) {
        for (j = i; j < pages && !(vec[j] & 1); j++) {}
        if (j > i) add_evicted(lo + (long long)i * PAGE, lo + (long long)j * PAGE);
    }
    free(vec);
    return done;
}

int posix_fadvise(int fd, off_t off, off_t len, int advice) {
    return evicting(fd, off, len, advice, real_fadvise(fd, off, len, advice));
}
int posix_fadvise64(int fd, off64_t off, off64_t len, int advice) {
    return evicting(fd, off, len, advice, real_fadvise64(fd, off, len, advice));
}
