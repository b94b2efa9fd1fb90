// The fan-out's floor on this machine: what the `fanout` scenario measures, with no server in it.
//
// One process, pinned to the server's cpu, holds N accepted loopback TCP connections and writes one
// chunk of B bytes to each (a writev of three parts, TCP_NODELAY, non-blocking: an SSE event's
// chunk as a server writes it). A reader, pinned to the tool's cpu, holds the other ends in one
// epoll set and reads every byte. Each round times the first write to the reader's last receipt;
// the rounds' p50 and p99 (nearest rank, as bench/realtime's tool reports) are printed as one JSON
// line, with the sender's time per write.
//
// No rule, no JSON, no HTTP parsing, no async runtime: a real server's fan-out cannot be faster
// than this on the same kernel and cpus. Built and run by bench/realtime.py (`--only floor`).
//
//   floor CONNS BYTES ROUNDS WRITER_CPU READER_CPU PAUSE_MS
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (sched_setaffinity(0, sizeof s, &s)) perror("sched_setaffinity");
}

static void die(const char *what) {
  perror(what);
  exit(1);
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double nearest_rank(double *sorted, int n, double p) {
  int rank = (int)((p / 100.0) * n + 0.999999);
  if (rank < 1) rank = 1;
  if (rank > n) rank = n;
  return sorted[rank - 1];
}

// Every end of every connection, in the reader: the round is done when each has BYTES more.
static void reader(int n, int bytes, int rounds, struct sockaddr_in *to, int go, int report) {
  int ep = epoll_create1(0);
  int *fds = malloc(n * sizeof(int));
  long *got = calloc(n, sizeof(long));
  for (int i = 0; i < n; i++) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) die("socket");
    // Source addresses 127.0.0.2.. so ephemeral ports never run out, as the tool does.
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000002 + i % 32)};
    if (bind(s, (void *)&from, sizeof from)) die("bind");
    if (connect(s, (void *)to, sizeof *to)) die("connect");
    fcntl(s, F_SETFL, O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev)) die("epoll_ctl");
    fds[i] = s;
  }
  char c;
  if (read(go, &c, 1) != 1) die("go");
  static char buf[1 << 16];
  struct epoll_event evs[512];
  for (int r = 0; r < rounds; r++) {
    long want = (long)(r + 1) * bytes;
    int done = 0;
    double last = 0;
    while (done < n) {
      int k = epoll_wait(ep, evs, 512, 10000);
      if (k <= 0) {
        fprintf(stderr, "floor: round %d: %d of %d connections complete after 10 s\n", r, done, n);
        exit(1);
      }
      for (int j = 0; j < k; j++) {
        int i = evs[j].data.u32;
        for (;;) {
          ssize_t z = read(fds[i], buf, sizeof buf);
          if (z <= 0) break;
          long before = got[i];
          got[i] += z;
          if (before < want && got[i] >= want) {
            done++;
            last = now_ms();
          }
        }
      }
    }
    if (write(report, &last, sizeof last) != sizeof last) die("report");
  }
  exit(0);
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: floor CONNS BYTES ROUNDS WRITER_CPU READER_CPU PAUSE_MS\n");
    return 2;
  }
  int n = atoi(argv[1]), bytes = atoi(argv[2]), rounds = atoi(argv[3]);
  int writer_cpu = atoi(argv[4]), reader_cpu = atoi(argv[5]), pause_ms = atoi(argv[6]);
  if (n < 1 || bytes < 16 || rounds < 1 || rounds > 1000) {
    fprintf(stderr, "floor: CONNS >= 1, BYTES >= 16, 1 <= ROUNDS <= 1000\n");
    return 2;
  }
  struct rlimit lim;
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < (rlim_t)n + 64) {
    fprintf(stderr, "floor: the open-files limit (%ld) is below %d connections\n", (long)lim.rlim_cur, n);
    return 1;
  }
  int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
  if (bind(ls, (void *)&at, sizeof at) || listen(ls, 4096)) die("listen");
  socklen_t len = sizeof at;
  getsockname(ls, (void *)&at, &len);
  int go[2], report[2];
  if (pipe(go) || pipe(report)) die("pipe");
  pid_t kid = fork();
  if (kid < 0) die("fork");
  if (kid == 0) {
    close(ls);
    pin(reader_cpu);
    reader(n, bytes, rounds, &at, go[0], report[1]);
  }
  pin(writer_cpu);
  int *conns = malloc(n * sizeof(int));
  for (int i = 0; i < n; i++) {
    conns[i] = accept(ls, 0, 0);
    if (conns[i] < 0) die("accept");
    setsockopt(conns[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(conns[i], F_SETFL, O_NONBLOCK);
  }
  if (write(go[1], "g", 1) != 1) die("go");
  usleep(200 * 1000);
  // A chunk as HTTP/1.1 frames an SSE event: size line, the event, CRLF.
  char size[16];
  int size_len = snprintf(size, sizeof size, "%X\r\n", bytes);
  int body = bytes - size_len - 2;
  char *event = malloc(body);
  memset(event, 'x', body);
  double *lat = malloc(rounds * sizeof(double)), *send = malloc(rounds * sizeof(double));
  for (int r = 0; r < rounds; r++) {
    double t0 = now_ms();
    for (int i = 0; i < n; i++) {
      struct iovec parts[3] = {{size, size_len}, {event, body}, {"\r\n", 2}};
      ssize_t z = writev(conns[i], parts, 3);
      if (z != bytes) {
        fprintf(stderr, "floor: a short write (%zd of %d bytes)\n", z, bytes);
        return 1;
      }
    }
    send[r] = now_ms() - t0;
    double last;
    if (read(report[0], &last, sizeof last) != sizeof last) die("reader");
    lat[r] = last - t0;
    usleep(pause_ms * 1000);
  }
  waitpid(kid, 0, 0);
  qsort(lat, rounds, sizeof(double), by_value);
  qsort(send, rounds, sizeof(double), by_value);
  printf("{\"conns\": %d, \"bytes\": %d, \"rounds\": %d, \"p50_ms\": %.2f, \"p99_ms\": %.2f, "
         "\"min_ms\": %.2f, \"send_p50_ms\": %.2f, \"us_per_write\": %.2f}\n",
         n, bytes, rounds, nearest_rank(lat, rounds, 50), nearest_rank(lat, rounds, 99), lat[0],
         nearest_rank(send, rounds, 50), 1000.0 * nearest_rank(send, rounds, 50) / n);
  return 0;
}
