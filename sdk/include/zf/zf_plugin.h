/* zf_plugin.h: the stable C ABI between zfcore (the host) and its plugins.
 *
 * Defines: ABI versioning and the two exported entry points, status codes and error messages,
 * tensor views and the flat-buffer layout (segments, blocks), the host-services table, declared
 * parameters, the plugin descriptor, memory estimates, and one function table per plugin kind
 * (stage, offload, optimizer, selector). sdk/CHANGELOG.md lists what each minor version added.
 *
 * Rules that keep it stable (C99; compiles as C and C++):
 *  - The first call is zf_plugin_negotiate; each side enforces its own minimum. A different major
 *    version is a clear rejection, never a crash.
 *  - Every struct that may grow starts with uint32_t struct_size and only grows at the end. A reader
 *    uses a field only when struct_size covers it. Fixed-size array elements have reserved fields.
 *  - No exceptions and no C++ types cross this boundary. Fallible entries return a zf_status and,
 *    when it is not ZF_OK, write a NUL-terminated message into the caller's zf_error.
 *  - Whoever allocates frees. Views handed to a plugin are borrowed for the duration of the call
 *    unless an entry says otherwise.
 *  - Optional entries may be NULL; the host then supplies the default written next to the entry.
 *  - Streams and events cross as opaque pointers (cudaStream_t on CUDA, NULL on CPU). A plugin
 *    never synchronizes the whole device.
 *  - The host loads a plugin once and never unloads it.
 *  - Threading: the host calls every entry of one plugin object from one thread (the training
 *    thread) unless the entry says otherwise. Host services are thread-safe unless noted.
 */
#ifndef ZF_PLUGIN_H
#define ZF_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Versioning ------------------------------------------------------------------------------ */

#define ZF_ABI_MAJOR 1
#define ZF_ABI_MINOR 11
#define ZF_ABI_MAKE(major, minor) ((((uint32_t)(major)) << 16) | ((uint32_t)(minor) & 0xffffu))
#define ZF_ABI_VERSION ZF_ABI_MAKE(ZF_ABI_MAJOR, ZF_ABI_MINOR)
#define ZF_ABI_MAJOR_OF(version) ((uint32_t)(version) >> 16)
#define ZF_ABI_MINOR_OF(version) ((uint32_t)(version) & 0xffffu)

#if defined(_WIN32)
#define ZF_EXPORT __declspec(dllexport)
#else
#define ZF_EXPORT __attribute__((visibility("default")))
#endif

/* True when the struct at `pointer` (of C type `type`, which starts with uint32_t struct_size)
 * is large enough to hold `member`: the way to test for a field added by a later minor version. */
#define ZF_HAS(type, pointer, member) \
  ((pointer)->struct_size >= offsetof(type, member) + sizeof(((const type *)0)->member))

/* ---- Status and errors ----------------------------------------------------------------------- */

typedef int32_t zf_status;
enum {
  ZF_OK = 0,
  ZF_DECLINED = 1,               /* "not on this machine": the host logs the message and skips */
  ZF_ERROR = 2,                  /* fatal: the run stops with the plugin's message */
  ZF_ERROR_INVALID_ARGUMENT = 3, /* fatal: a caller passed something the entry does not accept */
  ZF_ERROR_OUT_OF_MEMORY = 4,    /* fatal: an allocation failed */
  ZF_ERROR_UNSUPPORTED = 5,      /* fatal: the entry cannot do what was asked (dtype, device) */
  ZF_ERROR_COMMUNICATION = 6     /* fatal: a collective failed or a peer is gone */
};

#define ZF_MESSAGE_CAPACITY 1024
/* Written by the callee when it returns a status other than ZF_OK; owned by the caller, who copies
 * the message out. The callee always NUL-terminates within ZF_MESSAGE_CAPACITY. */
typedef struct zf_error {
  char message[ZF_MESSAGE_CAPACITY];
} zf_error;

/* ---- Tensors and the flat-buffer layout ------------------------------------------------------ */

typedef int32_t zf_dtype;
enum { ZF_DTYPE_F32 = 0, ZF_DTYPE_BF16 = 1, ZF_DTYPE_F16 = 2, ZF_DTYPE_F64 = 3,
       ZF_DTYPE_I32 = 4, ZF_DTYPE_I64 = 5, ZF_DTYPE_U8 = 6 };

typedef int32_t zf_device;
enum { ZF_DEVICE_CPU = 0, ZF_DEVICE_CUDA = 1 };

/* A contiguous run of numel elements. Borrowed: the owner keeps it alive. data == NULL means
 * "absent" wherever an entry documents a view as optional. */
typedef struct zf_tensor_view {
  void *data;
  uint64_t numel;
  zf_dtype dtype;
  zf_device device;
  int32_t device_index;
  int32_t reserved;
} zf_tensor_view;

enum {
  /* A 2-D weight W[rows = out, cols = in] stored column by column: column j (one input channel)
   * is the rows contiguous elements at offset + j * rows. ZenFlow selects whole columns. */
  ZF_SEGMENT_COLUMN_CONTIGUOUS = 1u << 0,
  /* Excluded from weight decay (biases, norms, 1-D parameters by default). */
  ZF_SEGMENT_NO_DECAY = 1u << 1,
  /* A 2-D weight whose columns a selector may choose among; 1-D parameters never carry it and are
   * always treated as important. */
  ZF_SEGMENT_MATRIX = 1u << 2,
  /* ABI 1.11: the model's tensor is W^T, [cols, rows]: a lookup table (the token embedding
   * [tokens, hidden]) seen as W[rows = hidden, cols = tokens] with ZF_SEGMENT_COLUMN_CONTIGUOUS, so
   * that a column is one token's row and a selector chooses among tokens. Selectors need not read it
   * (the columns are described as every other weight's); the host reads it to give the model its
   * [tokens, hidden] view. */
  ZF_SEGMENT_TRANSPOSED = 1u << 3
};

/* One parameter in the flat buffer. */
typedef struct zf_segment {
  const char *name;  /* e.g. "layers.3.weight"; valid for the plugin object's lifetime */
  uint64_t offset;   /* element offset in the flat buffer, a multiple of zf_layout.alignment */
  uint64_t numel;    /* rows * cols */
  uint64_t rows;     /* 2-D: output features; 1-D: numel */
  uint64_t cols;     /* 2-D: input features (columns); 1-D: 1 */
  uint32_t block;    /* index into zf_layout.blocks */
  uint32_t flags;    /* ZF_SEGMENT_* */
} zf_segment;

/* One block of the model the engine runs in order (embedding, each transformer layer, head).
 * A block's segments are contiguous: [offset, offset + numel) covers them and their padding.
 * Segments ascend in offset; blocks do in the model's block order, but with model.block_order =
 * "interleaved" the blocks lie in another order, so a later block may lie at a lower offset. */
typedef struct zf_block {
  const char *name;
  uint64_t offset;
  uint64_t numel;
  uint32_t first_segment;
  uint32_t segment_count;
} zf_block;

/* The flat buffer's table of contents; identical on every rank. */
typedef struct zf_layout {
  uint32_t struct_size;
  uint32_t segment_count;
  const zf_segment *segments;
  uint32_t block_count;
  uint32_t reserved;
  const zf_block *blocks;
  uint64_t numel;     /* elements of the whole flat buffer, padding included */
  uint64_t alignment; /* elements; every segment and block offset is a multiple of it */
} zf_layout;

/* ---- Host services --------------------------------------------------------------------------- */

typedef int32_t zf_log_level;
enum { ZF_LOG_DEBUG = 0, ZF_LOG_INFO = 1, ZF_LOG_WARN = 2, ZF_LOG_ERROR = 3 };

/* Memory tiers of the ledger. */
typedef int32_t zf_tier;
enum { ZF_TIER_DEVICE = 0, ZF_TIER_PINNED_HOST = 1, ZF_TIER_HOST = 2, ZF_TIER_NVME = 3,
       ZF_TIER_COUNT = 4 };

typedef int32_t zf_reduce_op;
enum { ZF_REDUCE_SUM = 0, ZF_REDUCE_MAX = 1, ZF_REDUCE_MIN = 2 };

/* A plugin object's validated config table (opaque). */
typedef struct zf_config zf_config;

typedef struct zf_host zf_host;
struct zf_host {
  uint32_t struct_size;
  uint32_t abi_version; /* the version both sides agreed on in zf_plugin_negotiate */
  void *context;        /* host-private */

  /* The run's data-parallel group; constant for the process lifetime. */
  int32_t rank;
  int32_t world_size;
  int32_t local_rank; /* rank among the processes of this host */
  int32_t local_size;
  zf_device device;   /* where the model computes */
  int32_t device_index;
  void *compute_stream; /* opaque cudaStream_t of the training step; NULL on CPU */

  /* Logging: message is copied before return; prefixed with the plugin name by the host. */
  void (*log)(const zf_host *host, zf_log_level level, const char *message);

  /* Named timers (the step breakdown). timer_id registers a name once and returns its id (stable
   * for the run); start/stop bracket one interval. stream == NULL measures host time; otherwise
   * the interval is measured with events recorded on that stream, without synchronizing. */
  uint32_t (*timer_id)(const zf_host *host, const char *name);
  void (*timer_start)(const zf_host *host, uint32_t timer, void *stream);
  void (*timer_stop)(const zf_host *host, uint32_t timer, void *stream);

  /* Memory, accounted in the ledger under tier and tag. Returns memory aligned to 4096 bytes (fit
   * for O_DIRECT and SIMD), or NULL with error filled. ZF_TIER_DEVICE allocates on the run's
   * device, ZF_TIER_PINNED_HOST page-locked host memory (plain host memory on CPU-only builds).
   * The caller owns the block and returns it with mem_free. */
  void *(*mem_alloc)(const zf_host *host, zf_tier tier, uint64_t bytes, const char *tag,
                     zf_error *error);
  void (*mem_free)(const zf_host *host, void *pointer);
  /* Records bytes held outside mem_alloc (an NVMe file, a library's workspace); delta may be
   * negative. */
  void (*mem_account)(const zf_host *host, zf_tier tier, const char *tag, int64_t delta_bytes);

  /* Config getters for the plugin's own table, already validated against its declared parameters;
   * an absent key yields the declared default. Undeclared keys and type mismatches return
   * ZF_ERROR_INVALID_ARGUMENT. Returned strings live as long as the config. Not thread-safe. */
  zf_status (*config_bool)(const zf_host *host, const zf_config *config, const char *key,
                           int32_t *value);
  zf_status (*config_int)(const zf_host *host, const zf_config *config, const char *key,
                          int64_t *value);
  zf_status (*config_float)(const zf_host *host, const zf_config *config, const char *key,
                            double *value);
  zf_status (*config_string)(const zf_host *host, const zf_config *config, const char *key,
                             const char **value);

  /* Collectives over the data-parallel group. Every rank calls them in the same order from its
   * training thread. CPU buffers: blocking. Device buffers: enqueued on stream (NULL = the
   * compute stream) and complete in stream order. all_reduce works in place; reduce_scatter
   * needs send.numel == recv.numel * world_size (rank r keeps part r); all_gather needs
   * recv.numel == send.numel * world_size, and (ABI 1.10) works in place when send is this rank's
   * part of recv (send.data == recv.data + rank * send.numel elements). */
  zf_status (*all_reduce)(const zf_host *host, zf_tensor_view buffer, zf_reduce_op op,
                          void *stream, zf_error *error);
  zf_status (*reduce_scatter)(const zf_host *host, zf_tensor_view send, zf_tensor_view recv,
                              zf_reduce_op op, void *stream, zf_error *error);
  zf_status (*all_gather)(const zf_host *host, zf_tensor_view send, zf_tensor_view recv,
                          void *stream, zf_error *error);
  zf_status (*broadcast)(const zf_host *host, zf_tensor_view buffer, int32_t root, void *stream,
                         zf_error *error);
  zf_status (*barrier)(const zf_host *host, zf_error *error);

  /* Cores reserved for this rank's plugin worker threads (physical cores, disjoint from the
   * training thread's and from other ranks' on the same host). Writes at most capacity core ids
   * and returns how many there are in total. */
  uint32_t (*worker_cores)(const zf_host *host, int32_t *cores, uint32_t capacity);

  /* ABI 1.1. Sum (op) of every rank's send into recv on rank root only (recv is ignored
   * elsewhere); send and recv have the same numel and dtype and must not overlap. Collective, as
   * above. */
  zf_status (*reduce)(const zf_host *host, zf_tensor_view send, zf_tensor_view recv, zf_reduce_op op,
                      int32_t root, void *stream, zf_error *error);

  /* ABI 1.2. Element-wise work on buffers of the run, in stream order on the device (stream NULL =
   * the compute stream), before return on the host. dst and src have the same numel and dtype.
   * copy: dst = src, host or device buffers in any direction. accumulate: dst += src (same
   * device), computed in fp32 and rounded once to the dtype. ABI 1.6: copy also converts between
   * the floating dtypes (F32, BF16, F16; rounded to nearest even) when dst and src are on one
   * device (or both on the host). */
  zf_status (*copy)(const zf_host *host, zf_tensor_view dst, zf_tensor_view src, void *stream,
                    zf_error *error);
  zf_status (*accumulate)(const zf_host *host, zf_tensor_view dst, zf_tensor_view src, void *stream,
                          zf_error *error);

  /* ABI 1.3. Streams and events, so that an offload plugin moves data on streams of its own,
   * ordered against the host's by events. Opaque cudaStream_t / cudaEvent_t on a GPU run; on a
   * CPU run every stream and event is NULL and every call below returns at once.
   * stream_create: a new stream on the run's device, owned by the host (destroyed at exit).
   * event_record: an event that completes when `stream` (NULL = the compute stream) reaches
   *   everything queued on it so far. Every event goes back to the host through exactly one
   *   event_wait or event_synchronize.
   * event_wait: `stream` (NULL = the compute stream) waits for the event; the host never blocks.
   * event_synchronize: the calling thread blocks until the event completed.
   * Thread-safe. */
  void *(*stream_create)(const zf_host *host);
  void *(*event_record)(const zf_host *host, void *stream);
  void (*event_wait)(const zf_host *host, void *stream, void *event);
  void (*event_synchronize)(const zf_host *host, void *event);
};

/* ---- Declared parameters --------------------------------------------------------------------- */

typedef int32_t zf_param_type;
enum { ZF_PARAM_BOOL = 1, ZF_PARAM_INT = 2, ZF_PARAM_FLOAT = 3, ZF_PARAM_STRING = 4 };

enum {
  ZF_PARAM_HAS_MIN = 1u << 0,
  ZF_PARAM_HAS_MAX = 1u << 1,
  ZF_PARAM_MIN_EXCLUSIVE = 1u << 2, /* with HAS_MIN: value > min instead of >= */
  ZF_PARAM_MAX_EXCLUSIVE = 1u << 3  /* with HAS_MAX: value < max instead of <= */
};

/* One key of the plugin's config table. The host validates the user's table against these before
 * create: unknown keys, wrong types, out-of-range values and strings outside choices are config
 * errors that name the file, line and column. */
typedef struct zf_param_decl {
  const char *key;
  zf_param_type type;
  uint32_t flags;            /* ZF_PARAM_* */
  const char *default_value; /* as text: "true", "4", "1e-3", "auto" (strings unquoted) */
  const char *doc;           /* one line, shown by `zfcore plugins --params` */
  double min;
  double max;
  const char *choices; /* strings: allowed values separated by '|', or NULL for any */
  const void *reserved;
} zf_param_decl;

/* ---- The descriptor and the entry points ----------------------------------------------------- */

typedef int32_t zf_kind;
enum { ZF_KIND_STAGE = 1, ZF_KIND_OFFLOAD = 2, ZF_KIND_OPTIMIZER = 3, ZF_KIND_SELECTOR = 4 };

/* Capability bits; the host checks each against the entries wired in the kind's table. */
enum {
  ZF_CAP_CPU = 1u << 0,           /* works on CPU tensors */
  ZF_CAP_CUDA = 1u << 1,          /* works on CUDA tensors */
  ZF_CAP_ASYNC = 1u << 2,         /* optimizer: submit and wait are wired */
  ZF_CAP_LOW_PRECISION_OUT = 1u << 3, /* optimizer: writes params_out (bf16/fp16) in the step */
  ZF_CAP_SHARD_OPTIMIZER = 1u << 4,   /* stage: each rank owns 1/N of master and state */
  ZF_CAP_SHARD_GRADIENTS = 1u << 5,   /* stage: each rank keeps 1/N of the gradients */
  ZF_CAP_SHARD_PARAMETERS = 1u << 6,  /* stage: block hooks gather/release parameters */
  ZF_CAP_NVME = 1u << 7,              /* offload: read_tile and write_tile are wired */
  ZF_CAP_SCORES = 1u << 8             /* selector: score is wired */
};

/* Static, valid for the process lifetime; returned by zf_plugin_describe. */
typedef struct zf_descriptor {
  uint32_t struct_size;
  uint32_t abi_version;    /* ZF_ABI_VERSION the plugin was compiled against */
  const char *name;        /* must equal NAME in the file name zf-KIND-NAME.so */
  zf_kind kind;
  uint32_t param_count;
  const zf_param_decl *params;
  const char *version;     /* the plugin's own version, e.g. "1.2.0" */
  const char *description; /* one line */
  uint64_t capabilities;   /* ZF_CAP_* */
  const void *api;         /* the kind's table: zf_stage_api, zf_offload_api, zf_optimizer_api or
                              zf_selector_api, each starting with struct_size */
} zf_descriptor;

/* Entry point 1, called first. host_version is the highest version the host speaks. Return the
 * highest version both support; return your own ZF_ABI_VERSION when the majors differ, so that the
 * host can say which side is older. Return 0 to refuse outright. Must not call anything else. */
typedef uint32_t (*zf_negotiate_fn)(uint32_t host_version);
#define ZF_NEGOTIATE_SYMBOL "zf_plugin_negotiate"

/* Entry point 2, called once after a successful negotiation. */
typedef const zf_descriptor *(*zf_describe_fn)(void);
#define ZF_DESCRIBE_SYMBOL "zf_plugin_describe"

/* ---- Plugin objects -------------------------------------------------------------------------- */

/* An instance created by a kind's create entry; opaque to the host. */
typedef struct zf_object zf_object;

/* Every kind's table starts with these three members (same order), so the host can create and
 * destroy any plugin object alike.
 *  create: host and config outlive the object. ZF_DECLINED = not on this machine (the host logs
 *          error->message and skips the plugin); other non-OK statuses stop the run.
 *  destroy: frees everything the object allocated; called once, after the last use. */
#define ZF_OBJECT_ENTRIES                                                                         \
  uint32_t struct_size;                                                                           \
  zf_status (*create)(const zf_host *host, const zf_config *config, zf_object **object,          \
                      zf_error *error);                                                           \
  void (*destroy)(zf_object * object)

/* What a stage or offload entry sees of one step's buffers. Views cover the whole flat buffer in
 * the layout's element space unless an entry says "shard". */
typedef struct zf_step_buffers {
  uint32_t struct_size;
  uint32_t micro_step;  /* 0-based micro-batch index within the optimizer step */
  uint32_t micro_steps; /* gradient accumulation steps per optimizer step */
  uint32_t reserved;
  int64_t step;         /* 1-based optimizer step being computed */
  const zf_layout *layout;
  zf_tensor_view params; /* working (compute-precision) parameters */
  zf_tensor_view grads;  /* gradients in compute precision, accumulated over micro-steps */
  void *stream;          /* where the entry queues its device work, NULL on CPU: the compute
                            stream, except for after_backward, reduce_block and gather_block, which
                            get the host's communication stream (ABI 1.2); the host orders it
                            against the compute stream (work queued there starts after the compute
                            queued so far, and compute waits for it before it reads the results) */
  /* ABI 1.1. With a stage that shards parameters (ZF_CAP_SHARD_PARAMETERS) the full params view
   * above has data == NULL: no rank holds every parameter. */
  zf_tensor_view param_shard;  /* this rank's parameters [shard_begin, shard_end), compute dtype.
                                  ABI 1.6: for a stage of ABI 1.6 or later, where the fp32 master
                                  lives beside the model (no offload), the host keeps no second
                                  copy: param_shard is the F32 master itself, and gather_block
                                  copies from it through host->copy, which converts */
  zf_tensor_view block_params; /* in gather_block: storage for that block's layout elements
                                  [block.offset, block.offset + block.numel); else data == NULL */
  /* ABI 1.1, with a stage that wires reduce_block (sharded gradients): no rank holds every
   * gradient, so grads above has data == NULL. */
  zf_tensor_view grad_shard;  /* this rank's reduced gradients [shard_begin, shard_end), summed
                                 over ranks and micro-steps so far; the optimizer reads it.
                                 ABI 1.6: it has memory (data != NULL) only from the step's first
                                 reduce_block, where it holds zeros, to the update */
  zf_tensor_view block_grads; /* in reduce_block: this rank's gradients of that block's layout
                                 elements [block.offset, block.offset + block.numel) */
} zf_step_buffers;

/* ---- Memory estimates (ABI 1.7) ------------------------------------------------------------- */

/* A run's shape, known before anything runs: what a stage or offload plugin needs to say how many
 * bytes each rank will hold (`zfcore estimate`, the memory plan, the advice of a refusal). An
 * optimizer (ABI 1.9) reads blocks and its config only. */
typedef struct zf_memory_estimate zf_memory_estimate;
typedef struct zf_memory_shape {
  uint32_t struct_size;
  uint32_t block_count;
  const uint64_t *blocks;  /* parameter elements per block, in execution order (layout numel = sum) */
  uint64_t alignment;      /* elements; shards are rounded up to it */
  uint64_t world_size;
  uint64_t compute_bytes;  /* bytes per element of the working parameters and gradients (fp32 4, bf16 2) */
  uint64_t state_bytes;    /* the optimizer's state bytes per parameter (Adam with fp32 moments: 8) */
  uint64_t grad_accum;     /* micro-steps per optimizer step */
  uint64_t stage_capabilities; /* ZF_CAP_* of the stage the estimate is for (an offload reads it) */
  /* For an offload plugin: the stage's estimate of this shape; NULL when the stage has none. */
  const zf_memory_estimate *stage;
  /* The plugin's own validated config table, read as with zf_host's getters (an absent key yields
   * the declared default). No zf_host exists here: the plugin may not have been created. */
  const zf_config *config;
  zf_status (*config_bool)(const zf_config *config, const char *key, int32_t *value);
  zf_status (*config_int)(const zf_config *config, const char *key, int64_t *value);
  zf_status (*config_float)(const zf_config *config, const char *key, double *value);
  zf_status (*config_string)(const zf_config *config, const char *key, const char **value);
} zf_memory_shape;

/* Bytes one rank holds at its peak. The host zeroes it and sets struct_size before the call.
 * ZF_TIER_DEVICE means "where the model computes" (host memory on a CPU run). */
struct zf_memory_estimate {
  uint32_t struct_size;
  uint32_t reserved;
  /* A stage fills the categories, all where the model computes; an offload plugin leaves them. */
  uint64_t params;    /* working parameters held between uses */
  uint64_t grads;     /* gradients held from the backward to the update */
  uint64_t master;    /* fp32 master parameters */
  uint64_t state;     /* optimizer state */
  uint64_t staging;   /* collective buffers */
  uint64_t transient; /* held only while one block computes */
  uint64_t reference; /* the ZeRO paper's figure for this stage (mixed-precision Adam), 0 = none */
  /* Both kinds: bytes per tier. A stage puts the sum of its categories on ZF_TIER_DEVICE; an
   * offload plugin says where the stage's bytes go once it moves some of them. */
  uint64_t tier_bytes[ZF_TIER_COUNT];
  char note[ZF_MESSAGE_CAPACITY];   /* optional: what the figures leave out; "" = nothing */
  char advice[ZF_MESSAGE_CAPACITY]; /* optional: how to need less memory with this plugin kind */
};

/* The entry both kinds may wire (ABI 1.7), called without a plugin object, from any thread:
 *   zf_status (*estimate_memory)(const zf_memory_shape *shape, zf_memory_estimate *estimate,
 *                                zf_error *error);
 * ZF_DECLINED = no estimate for this shape (the message says why). NULL = "no estimate". */
typedef zf_status (*zf_estimate_memory_fn)(const zf_memory_shape *shape, zf_memory_estimate *estimate,
                                           zf_error *error);

/* ---- Stage: who owns which shard, and which collectives move gradients and parameters -------- */

typedef struct zf_stage_plan {
  uint32_t struct_size;
  uint32_t reserved;
  uint64_t shard_begin;  /* layout elements whose fp32 master and optimizer state this rank owns */
  uint64_t shard_end;
  uint64_t padded_numel; /* size the host gives the flat buffers (>= layout numel), so that every
                            rank's shard can have the same length; 0 = layout numel */
  /* ABI 1.1: host-owned, layout->block_count bytes, each 1 on entry. A stage with
   * ZF_CAP_SHARD_PARAMETERS sets 0 for each block the host should hold only while it computes
   * (between before_forward/after_forward and before_backward/after_backward): the host then keeps
   * just this rank's shard of it and calls gather_block before each use. Blocks left at 1 stay
   * resident (gathered after every optimizer step). Ignored for other stages. */
  uint8_t *block_resident;
  /* ABI 1.2, with ZF_CAP_SHARD_PARAMETERS: elements of the blocks after the current one (in
   * execution order) that the host may gather ahead, on its communication stream, while the
   * current one computes; at least the next block when > 0. 0 on entry = no prefetch. */
  uint64_t prefetch_numel;
} zf_stage_plan;

typedef struct zf_stage_api {
  ZF_OBJECT_ENTRIES;
  /* Once, before the first step: decide this rank's shard of the layout. Required. */
  zf_status (*plan)(zf_object *stage, const zf_layout *layout, zf_stage_plan *plan,
                    zf_error *error);
  /* Around each block's forward and backward, in execution order (ZeRO-3 gathers a block's
   * parameters before and releases them after; after_backward is where a bucketed reduce-scatter
   * of that block's gradients starts). Optional: NULL = nothing. */
  zf_status (*before_forward)(zf_object *stage, uint32_t block, const zf_step_buffers *buffers,
                              zf_error *error);
  zf_status (*after_forward)(zf_object *stage, uint32_t block, const zf_step_buffers *buffers,
                             zf_error *error);
  zf_status (*before_backward)(zf_object *stage, uint32_t block, const zf_step_buffers *buffers,
                               zf_error *error);
  zf_status (*after_backward)(zf_object *stage, uint32_t block, const zf_step_buffers *buffers,
                              zf_error *error);
  /* After the last micro-step's backward: leave in buffers->grads[shard_begin, shard_end) the sum
   * over all ranks of their accumulated gradients (the host applies 1 / (world * micro_steps)).
   * With one rank the gradients are that sum already and must be left as they are (ABI 1.3: the
   * host may copy them during the backward). Required. */
  zf_status (*reduce_gradients)(zf_object *stage, const zf_step_buffers *buffers,
                                zf_error *error);
  /* After the optimizer wrote this rank's shard of buffers->params: make the parameters every
   * rank needs for the next forward available (all-gather). Optional: NULL = nothing. */
  zf_status (*gather_parameters)(zf_object *stage, const zf_step_buffers *buffers,
                                 zf_error *error);
  /* ABI 1.1, required with ZF_CAP_SHARD_PARAMETERS, otherwise NULL. Fill buffers->block_params
   * with block `block`'s parameters from every rank's buffers->param_shard (a collective: every
   * rank calls it for the same block). The host calls it before the block's forward and backward
   * when the block is not resident, for resident blocks at their first use after each optimizer
   * step (while the update may still write other blocks' shards), and for every
   * block before it needs the whole model (export, sampling). The host allocates and frees the
   * storage; the ledger shows it as "params.gathered" (transient) and "params.resident". */
  zf_status (*gather_block)(zf_object *stage, uint32_t block, const zf_step_buffers *buffers,
                            zf_error *error);
  /* ABI 1.1, optional (ZF_CAP_SHARD_GRADIENTS). When wired, the host keeps no whole gradient
   * buffer: each block's gradients live in storage the host attaches for the block's backward, and
   * after it (every micro-step) the host calls reduce_block, which must add the sum over ranks of
   * buffers->block_grads into the owners' buffers->grad_shard (a collective: every rank calls it
   * for the same block); the host then frees the block's gradients ("grads.block" in the ledger;
   * the shard is "grads.shard"). reduce_gradients is still called after the last micro-step.
   * ABI 1.3: on the last micro-step a block's part of grad_shard is final once its reduce_block
   * returned (in stream order): the host may copy it out while earlier blocks run backward.
   * ABI 1.6: on micro_step 0 grad_shard holds zeros where no block was reduced yet, so a stage
   * may write the sum there (reduce straight into it) instead of adding it.
   * NULL = the host keeps the whole flat gradient buffer (buffers->grads). */
  zf_status (*reduce_block)(zf_object *stage, uint32_t block, const zf_step_buffers *buffers,
                            zf_error *error);
  /* ABI 1.7, optional: this stage's bytes per rank for a shape (see zf_estimate_memory_fn). */
  zf_estimate_memory_fn estimate_memory;
} zf_stage_api;

/* ---- Offload: where master weights, optimizer state and gradients live ----------------------- */

typedef struct zf_offload_plan {
  uint32_t struct_size;
  zf_tier master_tier; /* fp32 master parameters of the shard */
  zf_tier state_tier;  /* optimizer state (ABI 1.3: the host allocates it there, see bind_state) */
  zf_tier grad_tier;   /* gradients handed to the optimizer */
  /* ABI 1.3. Where the compute-precision copy of the updated shard is written (the optimizer's
   * params_out): the model's own tier = straight into the working parameters; another tier = a
   * buffer there, which parameters_in moves to the working parameters. */
  zf_tier param_out_tier;
  /* ABI 1.3. 1 = overlap: the host hands the offload plugin each bucket of the gradient shard as
   * soon as it is final (during the last micro-step's backward), updates each bucket as soon as it
   * landed, and uploads each bucket as soon as it is updated. 0 = one bucket after the backward. */
  uint32_t overlap;
  /* ABI 1.3. Elements per bucket (gradient copies, CPU updates and uploads); 0 = the whole shard. */
  uint64_t bucket_numel;
  /* ABI 1.5. Where the working (compute-precision) parameters live between the uses of their
   * blocks. On entry the model's own tier (the GPU on a GPU run): the whole buffer stays there.
   * A host tier = parameter offload: the host keeps this rank's parameters there (its shard under
   * a stage that shards parameters, all of them otherwise), copies each block to the device
   * before its forward and backward (on its communication stream, ahead of use up to
   * prefetch_numel elements) and frees it after. Set param_out_tier to the same tier: the
   * optimizer then writes the updated parameters there and nothing is uploaded after the step. */
  zf_tier param_tier;
  uint32_t reserved;
  /* ABI 1.5, with a host param_tier: elements of the next blocks the host copies ahead while the
   * current one computes; 0 = none. A stage that shards parameters (ZeRO-3) sets its own budget
   * (zf_stage_plan.prefetch_numel), which is used instead. */
  uint64_t prefetch_numel;
  /* ABI 1.8. The share of this rank's optimizer shard (its last elements, whose gradients the
   * backward finishes first) kept on master_tier and state_tier and updated there; the first
   * (1 - host_ratio) of the elements keep their master and optimizer state where the model
   * computes and are updated there every step, beside the host's part (DeepSpeed's
   * offload_optimizer.ratio). On entry 1 (all of it); 0 = none. Needs param_tier on the model's
   * tier. */
  double host_ratio;
  /* ABI 1.9. Nonzero: the host chooses host_ratio itself (offload.ratio = "auto"): the whole
   * shard is updated on master_tier in the first step, then the elements whose master and state
   * fit the memory that step left where the model computes move there. On entry 0. */
  uint32_t host_ratio_auto;
  uint32_t reserved2;
} zf_offload_plan;

typedef struct zf_offload_api {
  ZF_OBJECT_ENTRIES;
  /* Once, before the first step: choose the tiers for this rank's shard. Required. */
  zf_status (*plan)(zf_object *offload, const zf_layout *layout, uint64_t shard_numel,
                    zf_offload_plan *plan, zf_error *error);
  /* Start moving the owned gradient shard (ABI 1.3: or one bucket of it) from the compute device
   * to where the optimizer reads it, on the plugin's own stream, ordered after the work already on
   * `stream`. Optional: NULL when grad_tier is the compute device's (nothing moves).
   * Threading (ABI 1.3): gradients_out is called from the thread that runs the backward, and
   * parameters_in from the host's update thread, possibly at the same time; each is called from
   * one thread at a time. ABI 1.4: in ZenFlow runs the update thread also calls gradients_out
   * (the interval's gradient sum, bucket by bucket), never at the same time as the backward's. */
  zf_status (*gradients_out)(zf_object *offload, zf_tensor_view device_grads,
                             zf_tensor_view optimizer_grads, void *stream, zf_error *error);
  /* Start moving updated compute-precision parameters back to the device; `stream` will wait
   * for them before the next forward. Optional, as above. */
  zf_status (*parameters_in)(zf_object *offload, zf_tensor_view host_params,
                             zf_tensor_view device_params, void *stream, zf_error *error);
  /* Block the calling thread until every transfer started above has landed. Optional. */
  zf_status (*wait)(zf_object *offload, zf_error *error);
  /* NVMe tier (ZF_CAP_NVME): persist or load bytes of tensor `tensor` at byte offset `offset`.
   * Buffers come from mem_alloc (4096-aligned); both may return before the I/O is done, and wait
   * completes it. Optional. */
  zf_status (*write_tile)(zf_object *offload, uint32_t tensor, uint64_t offset, const void *source,
                          uint64_t bytes, zf_error *error);
  zf_status (*read_tile)(zf_object *offload, uint32_t tensor, uint64_t offset, void *destination,
                         uint64_t bytes, zf_error *error);
  /* ABI 1.3. An event (host services: event_record on the plugin's stream) that completes when
   * every transfer of `direction` started so far has landed; *event = NULL when nothing is in
   * flight or on a CPU run. The host waits on it: its update thread before the optimizer reads a
   * bucket's gradients, the compute stream before the next forward reads the parameters. Called
   * from the thread that started the transfers. Optional: NULL = the host calls wait. */
  zf_status (*transfer_event)(zf_object *offload, int32_t direction, void **event, zf_error *error);
  /* ABI 1.7, optional: where the stage's bytes (shape->stage) go under this offload, per tier
   * (see zf_estimate_memory_fn). */
  zf_estimate_memory_fn estimate_memory;
} zf_offload_api;

enum { ZF_TRANSFER_GRADIENTS_OUT = 0, ZF_TRANSFER_PARAMETERS_IN = 1 };

/* ---- Optimizer: the update math on one device ------------------------------------------------ */

/* Hyperparameters of one parameter group. Fixed size; new fields take reserved slots. */
typedef struct zf_optimizer_group {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay; /* decoupled (AdamW) or L2 (Adam), as the optimizer's own config says */
  float reserved[3];
} zf_optimizer_group;

/* Elements [begin, end) of the step's views, updated with group `group`. */
typedef struct zf_optimizer_range {
  uint64_t begin;
  uint64_t end;
  uint32_t group;
  uint32_t reserved;
} zf_optimizer_range;

typedef struct zf_optimizer_step_args {
  uint32_t struct_size;
  uint32_t range_count;
  const zf_optimizer_range *ranges; /* disjoint, sorted, within [0, params.numel) */
  const zf_optimizer_group *groups;
  uint32_t group_count;
  float grad_scale;       /* gradients are multiplied by this before use (mean, unscale, clip) */
  int64_t step;           /* 1-based count of updates so far including this one (bias correction) */
  zf_tensor_view params;  /* fp32 master; element i pairs with state element i */
  zf_tensor_view grads;   /* same numel as params; F32, BF16 or F16 */
  zf_tensor_view params_out; /* optional BF16/F16 copy of the updated params (ZF_CAP_LOW_PRECISION_OUT) */
  void *stream;           /* device optimizers enqueue here; NULL on CPU */
} zf_optimizer_step_args;

typedef struct zf_optimizer_api {
  ZF_OBJECT_ENTRIES;
  /* Once, before the first step: allocate state for numel elements (through mem_alloc, so the
   * ledger sees it). Required. */
  zf_status (*init_state)(zf_object *optimizer, uint64_t numel, zf_error *error);
  /* Update the ranges now. Required. */
  zf_status (*step)(zf_object *optimizer, const zf_optimizer_step_args *args, zf_error *error);
  /* ZF_CAP_ASYNC: start the same update and return at once. The plugin copies *args (ranges and
   * groups included); the host leaves the viewed buffers alone until wait returns. At most one
   * submitted step is in flight. Optional: NULL = the host calls step. */
  zf_status (*submit)(zf_object *optimizer, const zf_optimizer_step_args *args, zf_error *error);
  zf_status (*wait)(zf_object *optimizer, zf_error *error);
  /* State for checkpoints: fills name and a view of state tensor `index` (owned by the plugin,
   * valid until destroy) and returns ZF_OK, or returns ZF_DECLINED past the last one. Optional. */
  zf_status (*state_tensor)(zf_object *optimizer, uint32_t index, const char **name,
                            zf_tensor_view *view, zf_error *error);
  /* ABI 1.3. Host-owned state: the host allocates the state on the tier the offload plugin chose
   * (device, pinned host, later NVMe-backed tiles) and the ledger sees every byte.
   * state_spec: name and element dtype of state tensor `index` (one element per parameter);
   *   ZF_DECLINED past the last one. Called after create, before bind_state.
   * bind_state: use these views (count = the number of specs, numel elements each, in spec order)
   *   as the state from now on, instead of init_state, and write their initial values. They stay
   *   valid until destroy (ABI 1.4: or until bind_state is called again with new views, which
   *   ZenFlow does for its GPU update at each selection: the new views replace the old ones and
   *   get initial values). Both optional: NULL = init_state allocates the state privately. */
  zf_status (*state_spec)(zf_object *optimizer, uint32_t index, const char **name, zf_dtype *dtype,
                          zf_error *error);
  zf_status (*bind_state)(zf_object *optimizer, uint64_t numel, const zf_tensor_view *state,
                          uint32_t count, zf_error *error);
  /* ABI 1.9, optional: this optimizer's state for a shape (see zf_estimate_memory_fn): fills
   * `state` with the bytes of its state for all of the shape's elements (the sum of its blocks),
   * which the host divides by them for zf_memory_shape.state_bytes. NULL = "no estimate" (the
   * host then assumes Adam's 8 bytes an element). */
  zf_estimate_memory_fn estimate_memory;
} zf_optimizer_api;

/* ---- Selector: which gradient columns matter now --------------------------------------------- */

typedef struct zf_select_args {
  uint32_t struct_size;
  uint32_t column_count;   /* sum of cols over the layout's ZF_SEGMENT_MATRIX segments */
  const zf_layout *layout;
  zf_tensor_view grads;    /* gradients in layout element space starting at grad_offset */
  uint64_t grad_offset;    /* layout element of grads.data[0] (a rank's shard starts later) */
  void *stream;
  /* ABI 1.4: zenflow.topk_ratio, the fraction of each weight's columns to select, in (0, 1]. */
  double topk_ratio;
} zf_select_args;

typedef struct zf_selector_api {
  ZF_OBJECT_ENTRIES;
  /* Score the columns of the MATRIX segments from the gradients inside the grads view: scores
   * (F32, column_count elements, in segment order, on the grads view's device) gets for every
   * column the score of its elements inside the view and 0 for columns wholly outside it. The
   * host sums the ranks' score vectors (nothing larger crosses the network), so a score must be
   * a sum over a column's elements (an L1 norm, a squared L2 norm): then a column that straddles
   * two ranks' shards is scored whole. Enqueue on args->stream. Optional (ZF_CAP_SCORES):
   * NULL = all scores 0. */
  zf_status (*score)(zf_object *selector, const zf_select_args *args, zf_tensor_view scores,
                     zf_error *error);
  /* From the reduced scores (on the host), mark the important columns: mask (U8, column_count
   * elements, host) gets 1 for a selected column and 0 otherwise. Every rank must choose the same
   * columns from the same scores. Required. */
  zf_status (*select)(zf_object *selector, const zf_select_args *args, zf_tensor_view scores,
                      zf_tensor_view mask, zf_error *error);
} zf_selector_api;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ZF_PLUGIN_H */
