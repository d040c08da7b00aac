/*
 * The GPU's timeline of a process, for bench/gpu/kernel_trace.py: a CUDA
 * injection library (CUDA_INJECTION64_PATH) that records, with NVIDIA's
 * CUPTI activity API, every kernel, copy and memset the device ran (start
 * and end on the device's clock) and every driver call the host made (start
 * and end on the same clock), and writes them when the process exits to
 * $EXMLX_KERNEL_TRACE.<pid>.tsv, one record a line:
 *
 *   k START END STREAM CORRELATION NAME   a kernel
 *   c START END STREAM CORRELATION BYTES  a copy
 *   s START END STREAM CORRELATION BYTES  a memset
 *   d START END CBID CORRELATION          a driver call (CBID: cupti_driver_cbid.h),
 *                                         when EXMLX_KERNEL_TRACE_DRIVER is set
 *
 * after a first line `# CMDLINE`. A kernel's CORRELATION is that of the
 * driver call that launched it (a kernel, or a CUDA graph holding it).
 * Built by bench/gpu/stage.sh against the CUPTI wheel's headers; works with
 * any process that uses CUDA (the BEAM running ExMLX, Python mlx, PyTorch).
 */
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUFFER_BYTES (8u << 20)

typedef struct {
  uint64_t start, end;
  const char *name; /* kernels: CUPTI's name, shared by every record of it */
  uint64_t bytes;   /* copies and memsets */
  uint32_t a, correlation;
  char kind;
} record;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static record *records;
static size_t count, capacity;
static int failed;

static void add(record r) {
  pthread_mutex_lock(&lock);
  if (count == capacity && !failed) {
    size_t grown = capacity ? capacity * 2 : (1u << 20);
    record *more = realloc(records, grown * sizeof(record));
    if (more) {
      records = more;
      capacity = grown;
    } else {
      failed = 1;
    }
  }
  if (count < capacity) records[count++] = r;
  pthread_mutex_unlock(&lock);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = aligned_alloc(8, BUFFER_BYTES);
  *size = *buffer ? BUFFER_BYTES : 0;
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t *buffer,
                                      size_t size, size_t valid) {
  (void)context;
  (void)stream;
  (void)size;
  CUpti_Activity *r = NULL;
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    switch (r->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)r;
        add((record){k->start, k->end, k->name, 0, k->streamId, k->correlationId, 'k'});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)r;
        add((record){m->start, m->end, NULL, m->bytes, m->streamId, m->correlationId, 'c'});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)r;
        add((record){m->start, m->end, NULL, m->bytes, m->streamId, m->correlationId, 's'});
        break;
      }
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        CUpti_ActivityAPI *d = (CUpti_ActivityAPI *)r;
        add((record){d->start, d->end, NULL, 0, d->cbid, d->correlationId, 'd'});
        break;
      }
      default:
        break;
    }
  }
  free(buffer);
}

static void write_trace(void) {
  const char *prefix = getenv("EXMLX_KERNEL_TRACE");
  if (!prefix) return;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  char path[4096];
  snprintf(path, sizeof path, "%s.%d.tsv", prefix, (int)getpid());
  FILE *f = fopen(path, "w");
  if (!f) return;
  char cmdline[1024] = {0};
  FILE *c = fopen("/proc/self/cmdline", "r");
  if (c) {
    size_t n = fread(cmdline, 1, sizeof cmdline - 1, c);
    for (size_t i = 0; i < n; i++)
      if (cmdline[i] == '\0') cmdline[i] = ' ';
    fclose(c);
  }
  fprintf(f, "# %s%s\n", cmdline, failed ? " (records dropped: out of memory)" : "");
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < count; i++) {
    record *r = &records[i];
    if (r->kind == 'k') {
      fprintf(f, "k %llu %llu %u %u %s\n", (unsigned long long)r->start,
              (unsigned long long)r->end, r->a, r->correlation, r->name ? r->name : "?");
    } else if (r->kind == 'd') {
      fprintf(f, "d %llu %llu %u %u\n", (unsigned long long)r->start, (unsigned long long)r->end,
              r->a, r->correlation);
    } else {
      fprintf(f, "%c %llu %llu %u %u %llu\n", r->kind, (unsigned long long)r->start,
              (unsigned long long)r->end, r->a, r->correlation, (unsigned long long)r->bytes);
    }
  }
  pthread_mutex_unlock(&lock);
  fclose(f);
}

/* The CUDA driver calls this once, at cuInit, in a process whose
 * CUDA_INJECTION64_PATH names this library. */
int InitializeInjection(void) {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS)
    return 0;
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  /* (recording every driver call costs the host time at each) */
  if (getenv("EXMLX_KERNEL_TRACE_DRIVER")) cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER);
  atexit(write_trace);
  return 1;
}
