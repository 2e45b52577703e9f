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

int base_read_file(const char *path, char **data, size_t *n) {
    *data = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    size_t size = (size_t)st.st_size, got = 0;
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
