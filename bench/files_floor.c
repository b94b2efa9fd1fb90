// The downloads' floor on this machine: a server that does nothing but send one file.
//
// One thread, one epoll loop, pinned by the caller (taskset). Every request on every keep-alive
// connection, whatever it asks, gets the same file with a Content-Length head, sent one of two
// ways: `rw` reads it in 256 KiB chunks with pread and writes them, the head with the first
// (what a server that owns its buffers does, ferrobase through hyper included), `sendfile`
// hands the file to the socket with sendfile(2) (no copy through user space), the head held
// back to leave with it. No routing, no rules, no headers to build: bench/
// files.py runs wrk against both beside the real servers (`--only ... ,floor`), so the table
// shows how far each server is from what the kernel allows.
//
//   files_floor FILE PORT rw|sendfile
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define CHUNK (256 * 1024)
#define HEAD_MAX 8192

struct conn {
  int fd;
  char in[HEAD_MAX];
  int in_len;
  int sending;  // a response is under way
  char head[256];
  int head_len, head_off;
  off_t file_off;  // bytes of the file sent
  int chunk_len, chunk_off;  // rw: the chunk being written
  char *chunk;               // rw: its buffer, the connection's own
};

static int use_sendfile;
static int file_fd;
static off_t file_size;

static void drop(int ep, struct conn *c) {
  epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, 0);
  close(c->fd);
  free(c->chunk);
  free(c);
}

// Start the next response if a whole head is buffered (pipelined heads are served in order).
static void next_request(struct conn *c) {
  char *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
  if (!end) return;
  int used = end + 4 - c->in;
  memmove(c->in, c->in + used, c->in_len - used);
  c->in_len -= used;
  c->sending = 1;
  c->head_len = snprintf(c->head, sizeof c->head,
                         "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %ld\r\n\r\n",
                         (long)file_size);
  c->head_off = 0;
  c->file_off = 0;
  c->chunk_len = c->chunk_off = 0;
}

// Send as much as the socket takes; 0 when it would block, -1 when the connection failed.
static int pump(struct conn *c) {
  for (;;) {
    if (!c->sending) {
      next_request(c);
      if (!c->sending) return 0;
    }
    if (c->head_off < c->head_len && use_sendfile) {
      // Held back (MSG_MORE) so that it leaves with the file's first bytes, as one segment.
      ssize_t n = send(c->fd, c->head + c->head_off, c->head_len - c->head_off, MSG_MORE | MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN ? 0 : -1;
      c->head_off += n;
      continue;
    }
    if (c->head_off == c->head_len && c->file_off >= file_size && c->chunk_off == c->chunk_len) {
      c->sending = 0;
      continue;
    }
    ssize_t n;
    if (use_sendfile) {
      off_t at = c->file_off;
      n = sendfile(c->fd, file_fd, &at, file_size - c->file_off);
      if (n < 0) return errno == EAGAIN ? 0 : -1;
      c->file_off += n;
    } else {
      if (c->chunk_off == c->chunk_len && c->file_off < file_size) {
        if (!c->chunk) c->chunk = malloc(CHUNK);
        ssize_t r = pread(file_fd, c->chunk, CHUNK, c->file_off);
        if (r <= 0) return -1;
        c->file_off += r;
        c->chunk_len = r;
        c->chunk_off = 0;
      }
      // The head goes out with the first chunk, in one writev.
      struct iovec parts[2] = {{c->head + c->head_off, c->head_len - c->head_off},
                               {c->chunk + c->chunk_off, c->chunk_len - c->chunk_off}};
      struct msghdr m = {.msg_iov = parts, .msg_iovlen = 2};
      n = sendmsg(c->fd, &m, MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN ? 0 : -1;
      int from_head = n < parts[0].iov_len ? n : (int)parts[0].iov_len;
      c->head_off += from_head;
      c->chunk_off += n - from_head;
    }
  }
}

int main(int argc, char **argv) {
  if (argc != 4 || (strcmp(argv[3], "rw") && strcmp(argv[3], "sendfile"))) {
    fprintf(stderr, "usage: files_floor FILE PORT rw|sendfile\n");
    return 2;
  }
  use_sendfile = !strcmp(argv[3], "sendfile");
  signal(SIGPIPE, SIG_IGN);  // a client that leaves mid-file is a failed write, not the end
  file_fd = open(argv[1], O_RDONLY);
  struct stat st;
  if (file_fd < 0 || fstat(file_fd, &st)) {
    perror(argv[1]);
    return 1;
  }
  file_size = st.st_size;
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2])),
                           .sin_addr.s_addr = htonl(0x7f000001)};
  if (bind(ls, (void *)&at, sizeof at) || listen(ls, 1024)) {
    perror("listen");
    return 1;
  }
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = 0};
  epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
  struct epoll_event evs[64];
  for (;;) {
    int k = epoll_wait(ep, evs, 64, -1);
    for (int j = 0; j < k; j++) {
      struct conn *c = evs[j].data.ptr;
      if (!c) {
        int fd;
        while ((fd = accept4(ls, 0, 0, SOCK_NONBLOCK)) >= 0) {
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          struct conn *n = calloc(1, sizeof *n);
          n->fd = fd;
          struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = n};
          epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
        }
        continue;
      }
      int closed = 0;
      for (;;) {  // edge-triggered: read until it would block
        if (c->in_len == HEAD_MAX) {
          closed = 1;  // a head this floor does not take
          break;
        }
        ssize_t n = read(c->fd, c->in + c->in_len, HEAD_MAX - c->in_len);
        if (n > 0) {
          c->in_len += n;
          continue;
        }
        if (n == 0 || errno != EAGAIN) closed = 1;
        break;
      }
      if (closed || pump(c) < 0) drop(ep, c);
    }
  }
}
