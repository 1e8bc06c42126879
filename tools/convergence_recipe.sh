#!/usr/bin/env bash
# The convergence recipe (docs/bench.md): how much each strategy learns per step and per second on
# real text, repeatable on any Debian or Ubuntu machine with python3, nothing to download.
#   1. builds two byte corpora from texts such a machine has (--pair):
#        python  (the tuned pair)   pretrain: the Python standard library's top-level modules
#                                   fine-tune: Python's reference documentation (pydoc's topics)
#        heldout (never tuned on)   pretrain: the standard library's packages (asyncio, email, ...)
#                                   fine-tune: the licences in /usr/share/common-licenses
#        docs    (prose to code)    pretrain: Python's reference documentation and the licences
#                                   fine-tune: the standard library's top-level modules
#   2. pretrains a byte-level GPT on the first with AdamW and exports it (checkpoint.export_hf);
#   3. runs `zfcore bench convergence` for the fine-tune on the second from that export, and from
#      scratch on the first: AdamW, synchronous offload and ZenFlow by default.
#
#   tools/convergence_recipe.sh                           # CPU, the quickstart's model size
#   tools/convergence_recipe.sh --device cuda             # one GPU, the GPT-2-small shape, bf16
#   tools/convergence_recipe.sh --pair heldout            # the other text pair (or docs, a third)
#   tools/convergence_recipe.sh -- --rows none zenflow 'zf-u1:zenflow,zenflow.update_interval=1'
#
# Options: --zfcore PATH (default $ZFCORE, else build/bin/zfcore), --device cpu|cuda (default cuda
# when nvidia-smi sees a GPU), --pair python|heldout|docs (default python), --output-dir DIR (default
# results/convergence-PAIR-DEVICE), --part finetune|scratch (one of the two benchmarks; default
# both), --python PATH (the Python whose standard library is read;
# default /usr/bin/python3, else python3). Arguments after `--` go to both benchmark runs.
# Sizes (environment; defaults CPU / GPU): HIDDEN 128 / 768, LAYERS 4 / 12, HEADS 4 / 12, SEQ 128 /
# 512, BATCH 16 / 16, PRETRAIN_STEPS 600, PRETRAIN_LR 3e-3 / 6e-4, FINETUNE_STEPS 300, FINETUNE_LR
# 1e-3 / 1e-4, SCRATCH_STEPS 600, SCRATCH_LR = PRETRAIN_LR, EVAL_EVERY 25 (scratch: twice that).
# A pretrained model already in OUTPUT_DIR/pretrained is reused; delete it to pretrain again.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

zfcore=${ZFCORE:-$repo/build/bin/zfcore}
device=""
pair=python
part=both
out=""
python=""
while (($#)); do
  case "$1" in
    --zfcore) zfcore=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --pair) pair=$2; shift 2 ;;
    --part) part=$2; shift 2 ;;
    --output-dir) out=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "convergence_recipe.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bench_args=("$@")

[ -x "$zfcore" ] || { echo "convergence_recipe.sh: no zfcore at $zfcore (build it, or give --zfcore PATH or ZFCORE)" >&2; exit 2; }
if [ -z "$device" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then device=cuda; else device=cpu; fi
fi
case "$device" in cpu|cuda) ;; *) echo "convergence_recipe.sh: --device $device: expected cpu or cuda" >&2; exit 2 ;; esac
case "$part" in both|finetune|scratch) ;; *) echo "convergence_recipe.sh: --part $part: expected finetune or scratch" >&2; exit 2 ;; esac
case "$pair" in python|heldout|docs) ;; *) echo "convergence_recipe.sh: --pair $pair: expected python, heldout or docs" >&2; exit 2 ;; esac
if [ -z "$python" ]; then
  if [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; else python=python3; fi
fi
out=${out:-results/convergence-$pair-$device}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [ "$device" = cuda ]; then
  : "${HIDDEN:=768}" "${LAYERS:=12}" "${HEADS:=12}" "${SEQ:=512}" "${PRETRAIN_LR:=6e-4}" "${FINETUNE_LR:=1e-4}"
else
  : "${HIDDEN:=128}" "${LAYERS:=4}" "${HEADS:=4}" "${SEQ:=128}" "${PRETRAIN_LR:=3e-3}" "${FINETUNE_LR:=1e-3}"
fi
: "${BATCH:=16}" "${PRETRAIN_STEPS:=600}" "${FINETUNE_STEPS:=300}" "${SCRATCH_STEPS:=600}" "${EVAL_EVERY:=25}"
: "${SCRATCH_LR:=$PRETRAIN_LR}"

# 1. The corpora: one text file each, its documents in a fixed order.
"$python" - "$pair" "$out/corpus" <<'EOF'
import os, sys, sysconfig
pair, out = sys.argv[1], sys.argv[2]
lib = sysconfig.get_paths()["stdlib"]
os.makedirs(out, exist_ok=True)

def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()

def top_level_modules():
    names = sorted(n for n in os.listdir(lib) if n.endswith(".py") and not n.startswith("_sysconfigdata"))
    return [read(os.path.join(lib, n)) for n in names]

# Packages that distributions split off or that are data rather than code.
SKIP = {"test", "tests", "idlelib", "tkinter", "turtledemo", "lib2to3", "distutils", "ensurepip", "encodings",
        "pydoc_data", "site-packages", "dist-packages", "__pycache__", "lib-dynload"}

def packages():
    texts = []
    for entry in sorted(os.listdir(lib)):
        top = os.path.join(lib, entry)
        if entry in SKIP or entry.startswith("config-") or not os.path.isdir(top):
            continue
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d not in SKIP)
            texts += [read(os.path.join(root, f)) for f in sorted(files) if f.endswith(".py")]
    return texts

def reference_topics():
    from pydoc_data.topics import topics
    return [topics[name] for name in sorted(topics)]

def licences():
    root = "/usr/share/common-licenses"
    return [read(os.path.join(root, n)) for n in sorted(os.listdir(root))
            if os.path.isfile(os.path.join(root, n)) and not os.path.islink(os.path.join(root, n))]

def prose():
    return reference_topics() + licences()

sources = {"python": (top_level_modules, reference_topics), "heldout": (packages, licences),
           "docs": (prose, top_level_modules)}[pair]
for name, build in zip(("pretrain", "finetune"), sources):
    text = "\n\n".join(build())
    with open(os.path.join(out, name + ".txt"), "w", encoding="utf-8") as f:
        f.write(text)
    print("corpus %s: %d bytes (%s, Python %s at %s)" % (name, len(text.encode()), build.__name__,
                                                          sys.version.split()[0], lib))
EOF

base=$repo/examples/convergence.toml
shape=(--set model.hidden="$HIDDEN" --set model.layers="$LAYERS" --set model.heads="$HEADS" --set model.max_seq="$SEQ")
[ "$device" = cuda ] && shape+=(--set model.dtype=bfloat16)
optimizer=cpu_adam
[ "$device" = cuda ] && optimizer=gpu_adam

# 2. Pretraining with AdamW, exported for the fine-tune.
if [ -f "$out/pretrained/config.json" ]; then
  echo "convergence_recipe.sh: reusing the pretrained model in $out/pretrained (delete it to pretrain again)"
else
  "$zfcore" run "$base" "${shape[@]}" --set run.device="$device" --set run.output_dir="$out/pretrain" \
    --set run.progress=off --set checkpoint.resume=never --set data.path="$out/corpus/pretrain.txt" \
    --set data.seq_len="$SEQ" --set train.micro_batch="$BATCH" --set train.steps="$PRETRAIN_STEPS" \
    --set train.eval_every=$((PRETRAIN_STEPS / 4)) --set optimizer.plugin="$optimizer" \
    --set optimizer.lr="$PRETRAIN_LR" --set checkpoint.export_hf="$out/pretrained"
fi

# 3. The benchmark: the fine-tune from the export, then from scratch on the pretraining text.
common=(--model "$base" --device "$device" --batch-size "$BATCH" --seq-length "$SEQ" "${shape[@]}")
[ "$part" = scratch ] || "$zfcore" bench convergence "${common[@]}" --output-dir "$out/finetune" \
  --num-steps "$FINETUNE_STEPS" --eval-every "$EVAL_EVERY" --set model.init_from="$out/pretrained" \
  --set data.path="$out/corpus/finetune.txt" --set optimizer.lr="$FINETUNE_LR" "${bench_args[@]}"
[ "$part" = finetune ] || "$zfcore" bench convergence "${common[@]}" --output-dir "$out/scratch" \
  --num-steps "$SCRATCH_STEPS" --eval-every $((2 * EVAL_EVERY)) --set data.path="$out/corpus/pretrain.txt" \
  --set optimizer.lr="$SCRATCH_LR" "${bench_args[@]}"
echo "convergence_recipe.sh: reports in $out/finetune/ and $out/scratch/ (convergence_*.html)"
