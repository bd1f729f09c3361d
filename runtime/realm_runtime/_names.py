"""Every name of the contract between the writers and the readers of artifacts and state files.

The files of an artifact directory, the graphs' input and output names, the manifest's keys,
the counters, the step's reasons, the settings' slots and the format versions, each defined
once. A leaf module: it imports nothing, so every module of the package (and, through
``realm_runtime.contract``, every package above it) reads the names from here.
``clients/js/contract.json`` and ``contract.js`` hold the same names for JavaScript, written
from this module by ``python dev/write_contract.py`` (``tests/runtime/test_contract_json.py`` keeps
them equal): a name is spelled once across both languages.
"""

# ------------------------------------------------------------------ format versions

ARTIFACT_FORMAT = "realm-tta/artifacts"  # realm.json's "format"
ARTIFACT_VERSION = 2  # the one version this library writes and reads
LAYOUT_VERSION = 1  # of the manifest's "portable" section
ADAPT_SECTION_VERSION = 1  # of the manifest's "adapt" section
STATE_FORMAT = "realm-tta/adaptation-state"  # a state file header's "format"
# Exactly the adapt graph's state tensors, under its input names (SPEC §11); the one version
# this library writes and reads.
STATE_VERSION = 3
SIGNATURE_FORMAT = "realm-tta/signature"  # realm.sig's "format"
SIGNATURE_VERSION = 1
SIGNATURE_ALGORITHM = "Ed25519"  # also WebCrypto's name for it

# ------------------------------------------------------------------ files of an artifact directory

MANIFEST_NAME = "realm.json"  # the manifest: every other file's SHA-256, sealed
SIGNATURE_NAME = "realm.sig"  # Ed25519 over the manifest's bytes (optional)
INFERENCE_MODEL = "inference_model.onnx"  # input -> logits, the source model
STEP_MODEL = "step_model.onnx"  # forward, loss, gradients and the SGD update in one graph
FORWARD_MODEL = "forward_model.onnx"  # input + norm parameters -> logits
SOURCE_PARAMS = "source_params.npy"  # (P,) float32: realm.params of the exported model
# The step and forward graphs' large float32 initializers (the model's weights), each stored
# once, as ONNX external data both graphs point to: a runtime can read them once and hand the
# same buffers to both sessions, and any ONNX loader given the file path still resolves them.
SHARED_WEIGHTS = "weights.bin"
# With `realm export --ort-format`, ONNX Runtime's converter writes step_model.ort and
# forward_model.ort beside the graphs (for mobile and minimal builds) and this operator list,
# which a reduced-size ONNX Runtime build is made with.
ORT_OPERATORS_CONFIG = "required_operators.config"
# The one adapt graph (SPEC §3 whole, for one sample): a client feeds the sample and the state
# the manifest's "adapt" section lists, and takes each state's next value for the next call.
ADAPT_MODEL = "adapt_model.onnx"
# The legacy onnxruntime-training artifacts (backend "ort-training").
TRAINING_MODEL = "training_model.onnx"
EVAL_MODEL = "eval_model.onnx"
CHECKPOINT = "checkpoint"

# Bounds both languages' readers enforce before they parse: more is a wrong file, and must
# not cost unbounded memory (a manifest is a few kB, a few hundred for the largest layouts).
MAX_MANIFEST_BYTES = 16 * 2**20
MAX_SIGNATURE_BYTES = 64 * 1024

# ------------------------------------------------------------------ manifest keys

DIGEST_KEY = "manifest_sha256"  # the manifest's last field: the SHA-256 of its own bytes
MANIFEST_REQUIRED = (
    "input",
    "logits_name",
    "num_classes",
    "config",
    "trainable",
    "files",
    "batch_norm",
)
PORTABLE_KEY = "portable"  # the portable graphs' section (or its "error")
ADAPT_KEY = "adapt"  # the one adapt graph's section (or its "error")
MEMORY_KEY = "memory"  # the measured updating peak, and the budget it was chosen for
INFERENCE_KEY = "inference"  # inference_model.onnx: which graph it is, its logits against torch
BATCH_NORM_KEY = "batch_norm"  # the trainable tensors of BatchNorm layers (lr_batch_norm's)
DRIFT_CHECK_KEY = "drift_check"  # the worst case inside each max_drift tried, and the one chosen
FIT_KEY = "fit"  # what `realm fit` measured to choose this configuration: data, rule, table
ERROR_KEY = "error"  # a section's only key where its graphs were not written: why
FILE_KEY = "file"  # the adapt section's graph; the weights section's file
# The portable section (and its "ort_format" subsection, which names the .ort files).
STEP_MODEL_KEY = "step_model"
FORWARD_MODEL_KEY = "forward_model"
SOURCE_PARAMS_KEY = "source_params"
ADAPT_MODEL_KEY = "adapt_model"  # in "ort_format" only: the adapt graph's .ort file
LAYOUT_KEY = "layout"  # [{name, offset, shape}] of realm.params
SIZE_KEY = "size"  # length of realm.params
BATCH_KEY = "batch"  # the largest batch the step graph takes
WEIGHTS_KEY = "weights"  # {"file": SHARED_WEIGHTS, ...}
ORT_FORMAT_KEY = "ort_format"
# The adapt section: the graph's input and outputs by role, the orders of its vector states.
ADAPT_INPUT_KEY = "input"  # the sample input
ADAPT_LOGITS_KEY = "logits"
ADAPT_UPDATED_KEY = "updated"
ADAPT_SELECTED_KEY = "selected"
ADAPT_REASON_KEY = "reason"
ADAPT_REASONS_KEY = "reasons"  # ADAPT_REASONS
ADAPT_LOSS_KEY = "loss"
ADAPT_COUNTERS_KEY = "counters"  # COUNTERS
ADAPT_WATCH_KEY = "watch"  # ADAPT_WATCH
ADAPT_KNOWN_KEY = "known"  # ADAPT_KNOWN
ADAPT_SETTINGS_KEY = "settings"  # the slots of realm.settings: exactly ADAPT_SETTINGS
ADAPT_STATE_KEY = "state"  # [{input, output, initial}] per state tensor
STATE_INPUT_KEY = "input"  # the state's graph input
STATE_OUTPUT_KEY = "output"  # the graph output holding its next value
STATE_INITIAL_KEY = "initial"  # the .npy file of its initial value

# ------------------------------------------------------------------ graph inputs and outputs

INPUT_NAME = "input"  # the model's sample input, as the exporter names it
LOGITS_NAME = "logits"  # the model's output
# Names the loss graph adds to the model (SPEC §2): trainable scalars and the extra input.
ALPHA_NAME = "realm.alpha"
LAMBDA_NAME = "realm.lambda"
SAMPLE_WEIGHT_NAME = "realm.sample_weight"
LOSS_NAME = "realm.loss"
# The step graph's.
PARAMS_NAME = "realm.params"  # (P,) every trainable tensor, flattened, in manifest order
VELOCITY_NAME = "realm.velocity"  # (P,) their SGD momentum buffers, same layout
NEW_PARAMS_NAME = "realm.new_params"  # (P,) output: the updated, projected parameters
NEW_VELOCITY_NAME = "realm.new_velocity"  # (P,) output: the updated momentum buffers
FINITE_NAME = "realm.finite"  # bool output: the loss and every gradient are finite
KEPT_NAME = "realm.kept"  # samples the step's own cut kept (SAR at θ + ε, DeYO's PLPD)
SAMPLE_INDEX_NAME = "realm.sample_index"  # int64: samples before this one (DeYO's draw)
# The adapt graph's outputs besides the logits.
ADAPT_UPDATED_NAME = "realm.updated"  # bool scalar output: the step was applied
ADAPT_SELECTED_NAME = "realm.selected"  # bool scalar output: the sample passed the filters
ADAPT_REASON_NAME = "realm.reason"  # int64 scalar output: an index into ADAPT_REASONS
ADAPT_LOSS_NAME = "realm.step_loss"  # float scalar output: the step's loss (0 if not selected)
# The adapt graph's state besides realm.params and realm.velocity.
EMA_NAME = "realm.ema"  # (C,) S_div's EMA of the updated predictions
MARGINAL_NAME = "realm.marginal"  # (C,) the watch's EMA of every prediction
WATCH_NAME = "realm.watch"  # (3,) the watch figures, in ADAPT_WATCH order
KNOWN_NAME = "realm.known"  # (4,) bool: which optional values exist, ADAPT_KNOWN order
SEEN_NAME = "realm.seen"  # int64: finite samples since the last reset
COUNTERS_NAME = "realm.counters"  # (9,) int64: the counters, in COUNTERS order
SETTINGS_NAME = "realm.settings"  # (K,) float32: the settings, ADAPT_SETTINGS order
NEXT_SUFFIX = ".next"  # a state input's next value is the output named input + NEXT_SUFFIX

# ------------------------------------------------------------------ node provenance

# Each node of the exported graphs carries, as ONNX metadata_props, the part of the step it
# belongs to and the aten op it was written for: a profile groups its time by them.
NODE_PART_KEY = "realm.part"
NODE_SOURCE_KEY = "realm.source"  # e.g. "aten.hardswish_backward.default"
# The parts of a step, in the order it runs them.
PART_FORWARD = "forward"  # the model on the sample, at the current parameters
PART_LOSS = "loss"  # the method's loss, its decision and any extra forward it takes
PART_BACKWARD = "backward"  # the gradient of the loss with respect to the parameters
PART_UPDATE = "update"  # the optimiser's step and the projection
STEP_PARTS = (PART_FORWARD, PART_LOSS, PART_BACKWARD, PART_UPDATE)

# ------------------------------------------------------------------ settings slots

# The step graph's hyper-parameter inputs (scalars), and the adapt graph's settings besides
# them. In the adapt graph all of them travel as one state vector, SETTINGS_NAME, that the
# graph passes through unchanged: a client that loops over the state feeds the export's
# values, and changes one by writing its slot (every ONNX Runtime binding can feed a state
# input; the JavaScript ones cannot feed an input that has an initializer).
LR_NAME = "realm.lr"  # learning rate of the norm parameters
LR_ALPHA_LAMBDA_NAME = "realm.lr_alpha_lambda"  # learning rate of α and λ
LR_BATCH_NORM_NAME = "realm.lr_batch_norm"  # learning rate of BatchNorm's θ (0: realm.lr)
MOMENTUM_NAME = "realm.momentum"  # SGD momentum μ
ENTROPY_MARGIN_NAME = "realm.entropy_margin"  # EATA's e0 (others ignore it)
SAM_RHO_NAME = "realm.sam_rho"  # SAR: SAM's radius ρ
ANCHOR_NAME = "realm.anchor"  # guardrails' share of θ − θ0 given back per update (0: off)
RELAX_NAME = "realm.relax"  # guardrails' share of α − α0, λ − λ0 given back (REALM; 0: off)
DIVERSITY_MARGIN_NAME = "realm.diversity_margin"  # S_div's d
EMA_BETA_NAME = "realm.ema_beta"  # β of the EMA of updated predictions
EMA_NEW_NAME = "realm.ema_new"  # 1 − β, rounded once on the host as the twins round it
MAX_DRIFT_NAME = "realm.max_drift"  # bound of ‖θ − θ0‖ / ‖θ0‖ (0: off)
FULL_RATE_NAME = "realm.full_rate"  # update rate at which max_drift holds in full (0: always)
COLLAPSE_LIMIT_NAME = "realm.collapse_limit"  # collapse·ln C (0: off)
RECOVERY_LOSS_NAME = "realm.recovery_loss"  # SAR's e_m
EPISODIC_NAME = "realm.episodic"  # 1: back to the source after every call, 0: not
PLPD_THRESHOLD_NAME = "realm.plpd_threshold"  # DeYO: keep a sample only if PLPD > this
# The slots of SETTINGS_NAME, in order: the step's rates, the methods' cuts, S_div and the EMA,
# the guardrails, the episodic reset.
ADAPT_SETTINGS = (
    LR_NAME,
    LR_BATCH_NORM_NAME,
    LR_ALPHA_LAMBDA_NAME,
    MOMENTUM_NAME,
    ENTROPY_MARGIN_NAME,
    SAM_RHO_NAME,
    PLPD_THRESHOLD_NAME,
    RECOVERY_LOSS_NAME,
    DIVERSITY_MARGIN_NAME,
    EMA_BETA_NAME,
    EMA_NEW_NAME,
    ANCHOR_NAME,
    RELAX_NAME,
    MAX_DRIFT_NAME,
    FULL_RATE_NAME,
    COLLAPSE_LIMIT_NAME,
    EPISODIC_NAME,
)

# ------------------------------------------------------------------ counters

# The counters every adaptation state carries (samples, except `updates`: optimizer steps).
COUNTER_SAMPLES = "samples"
COUNTER_UPDATES = "updates"
COUNTER_UPDATED_SAMPLES = "updated_samples"
COUNTER_SKIPPED_DIVERSITY = "skipped_diversity"
COUNTER_SKIPPED_ENTROPY = "skipped_entropy"
COUNTER_SKIPPED_NONFINITE = "skipped_nonfinite"
COUNTER_RESETS_RECOVERY = "resets_recovery"
COUNTER_RESETS_COLLAPSE = "resets_collapse"
COUNTER_DRIFT_CLIPS = "drift_clips"
COUNTERS = (
    COUNTER_SAMPLES,
    COUNTER_UPDATES,
    COUNTER_UPDATED_SAMPLES,
    COUNTER_SKIPPED_DIVERSITY,
    COUNTER_SKIPPED_ENTROPY,
    COUNTER_SKIPPED_NONFINITE,
    COUNTER_RESETS_RECOVERY,
    COUNTER_RESETS_COLLAPSE,
    COUNTER_DRIFT_CLIPS,
)
# The guardrails' interventions (the counters that say a guardrail acted).
INTERVENTIONS = (COUNTER_RESETS_RECOVERY, COUNTER_RESETS_COLLAPSE, COUNTER_DRIFT_CLIPS)

# ------------------------------------------------------------------ reason codes

# Why a step did or did not update; the adapt graph's realm.reason indexes ADAPT_REASONS.
REASON_UPDATED = "updated"
REASON_DIVERSITY = "diversity"  # every sample too similar to the EMA (S_div)
REASON_ENTROPY = "entropy"  # every sample too uncertain (EATA's, SAR's cut)
REASON_NONFINITE = "nonfinite"  # the logits, the loss or a gradient was not finite
REASON_FIXED = "fixed"  # the method never updates (TTAug): it only predicts
ADAPT_REASONS = (REASON_UPDATED, REASON_DIVERSITY, REASON_ENTROPY, REASON_NONFINITE, REASON_FIXED)

# ------------------------------------------------------------------ watch figures

# The slots of realm.watch (SPEC §10's figures) and of realm.known (which values exist).
FIGURE_UPDATE_RATE = "update_rate"  # EMA of the share of samples that updated
FIGURE_ENTROPY_EMA = "entropy_ema"  # EMA of the prediction entropy
FIGURE_LOSS_EMA = "loss_ema"  # SAR's loss EMA
ADAPT_WATCH = (FIGURE_UPDATE_RATE, FIGURE_ENTROPY_EMA, FIGURE_LOSS_EMA)
KNOWN_EMA = "ema"  # realm.ema holds a value
KNOWN_UPDATE_RATE = "update_rate"  # the update rate holds one
KNOWN_WATCH = "watch"  # the entropy EMA and the marginal hold one (finite samples seen)
KNOWN_LOSS_EMA = "loss_ema"  # SAR's loss EMA holds one
ADAPT_KNOWN = (KNOWN_EMA, KNOWN_UPDATE_RATE, KNOWN_WATCH, KNOWN_LOSS_EMA)

# ------------------------------------------------------------------ state-file members

STATE_HEADER_MEMBER = "__header__"  # the JSON header, as a uint8 array
