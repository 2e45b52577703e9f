/*
 * file.c — the file primitives of the caches and loaders: mkdir -p, whole-file reads that never
 * block on a FIFO or a device, and atomic writes (a temp file in the same directory, renamed into
 * place, so a reader sees the old file or the new one, never a part of it).
 */
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

int base_mkdir_p(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) { errno = ENAMETOOLONG; return -1; }
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        buf[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
}

int base_write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int base_write_atomic(const char *dir, const char *name, const void *data, size_t n) {
    char tmp[4096], dst[4096];
    if (snprintf(tmp, sizeof tmp, "%s/.tmp-XXXXXX", dir) >= (int)sizeof tmp ||
        snprintf(dst, sizeof dst, "%s/%s", dir, name) >= (int)sizeof dst)
        return -1;
    int fd = mkstemp(tmp);
    if (fd < 0) return -1;
    /* mkstemp makes 0600 files; cache entries are ordinary files (the umask applies). */
    mode_t um = umask(0);
    umask(um);
    (void)fchmod(fd, 0666 & ~um);
    int bad = base_write_all(fd, data, n);
    if (close(fd) != 0) bad = -1;
    if (bad == 0 && rename(tmp, dst) != 0) bad = -1;
    if (bad != 0) unlink(tmp);
    return bad;
}

const char *base_file_kind(unsigned mode) {
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "a special file";
    }
}

int base_open_regular(const char *path, uint64_t *size, unsigned *mode) {
    *size = 0;
    *mode = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    struct stat st;
    int flags;
    if (fstat(fd, &st) != 0 || (flags = fcntl(fd, F_GETFL)) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    *mode = (unsigned)st.st_mode;
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -2;
    }
    /* A regular file ignores O_NONBLOCK today; clear it anyway so reads are plain blocking reads. */
    if (fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    *size = (uint64_t)st.st_size;
    return fd;
}

int base_pread_all(int fd, void *buf, size_t n, uint64_t off) {
    char *p = buf;
    while (n > 0) {
        size_t want = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t r = pread(fd, p, want, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) return 1;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int base_read_file(const char *path, char **data, size_t *n) {
    *data = NULL;
    *n = 0;
    uint64_t fsize;
    unsigned mode;
    int fd = base_open_regular(path, &fsize, &mode);
    if (fd < 0) return -1; /* errno: EINVAL when it is not a regular file */
    size_t size = (size_t)fsize, got = 0;
    char *buf = st_malloc(size + 1);
    if (!buf) {
        close(fd);
        return -2;
    }
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != size) { /* truncated while we read it */
        st_free(buf);
        errno = EIO;
        return -1;
    }
    buf[got] = '\0';
    *data = buf;
    *n = got;
    return 0;
}
