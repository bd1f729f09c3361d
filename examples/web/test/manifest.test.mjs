// Unit tests of the manifest checks (node --test): the same errors as the Python runtime.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import { ArtifactError, parseManifest, sha256Hex, verifyFile } from "../manifest.js";

function manifest(overrides = {}) {
  return {
    format: "realm-tta/artifacts",
    version: 1,
    input: { name: "input", shape: ["batch", 1, 4, 4], dtype: "float32" },
    logits_name: "logits",
    num_classes: 3,
    config: { method: "realm" },
    trainable: { "n.weight": [2], "realm.alpha": [] },
    files: { "step_model.onnx": "aa", "forward_model.onnx": "bb", "source_params.npy": "cc", "decide_model.onnx": "dd" },
    versions: { onnxruntime: "1.19.2" },
    portable: {
      step_model: "step_model.onnx",
      forward_model: "forward_model.onnx",
      source_params: "source_params.npy",
      decide_model: "decide_model.onnx",
      size: 3,
      layout: [{ name: "n.weight", offset: 0, shape: [2] }, { name: "realm.alpha", offset: 2, shape: [] }],
    },
    ...overrides,
  };
}

test("a good manifest parses", () => {
  assert.equal(parseManifest(manifest()).num_classes, 3);
});

test("wrong format, version, missing fields and missing graphs are named", () => {
  assert.throws(() => parseManifest(manifest({ format: "x" })), /format "x" is not 'realm-tta\/artifacts'/);
  assert.throws(() => parseManifest(manifest({ version: 2 })), /artifact format version 2 is not supported .* re-export/);
  const { logits_name, ...rest } = manifest();
  assert.equal(logits_name, "logits");
  assert.throws(() => parseManifest(rest), /missing fields \["logits_name"\]/);
  assert.throws(() => parseManifest(manifest({ portable: undefined })), /no portable step graph; re-export/);
  assert.throws(() => parseManifest(manifest({ portable: { error: "no norm layer" } })), /no portable step graph: no norm layer/);
  const { decide_model, ...noDecide } = manifest().portable;
  assert.equal(decide_model, "decide_model.onnx");
  assert.throws(() => parseManifest(manifest({ portable: noDecide })), /no decision graph .* --no-web/);
  assert.throws(() => parseManifest([1, 2]), /does not hold a JSON object/);
  assert.throws(() => parseManifest(null), ArtifactError);
});

test("a layout with a gap, a wrong size and unlisted graphs are refused", () => {
  const gap = manifest();
  gap.portable.layout[1].offset = 3;
  assert.throws(() => parseManifest(gap), /portable.layout is not contiguous at realm.alpha/);
  const size = manifest();
  size.portable.size = 4;
  assert.throws(() => parseManifest(size), /portable.layout covers 3 values, portable.size is 4/);
  const unlisted = manifest({ files: { "step_model.onnx": "aa", "forward_model.onnx": "bb", "source_params.npy": "cc" } });
  assert.throws(() => parseManifest(unlisted), /decide_model.onnx is not listed among the checksummed files/);
});

test("sha256Hex agrees with node's hash", async () => {
  const bytes = new TextEncoder().encode("realm-tta");
  assert.equal(await sha256Hex(bytes), createHash("sha256").update(bytes).digest("hex"));
});

test("verifyFile: missing, tampered and good files", async () => {
  const bytes = new Uint8Array([1, 2, 3]);
  const m = manifest({ files: { "step_model.onnx": await sha256Hex(bytes) } });
  await verifyFile(m, "step_model.onnx", bytes, "dir");
  await assert.rejects(verifyFile(m, "step_model.onnx", null, "dir"), /dir\/step_model.onnx: listed in realm.json but missing/);
  await assert.rejects(
    verifyFile(m, "step_model.onnx", new Uint8Array([1, 2, 4]), "dir"),
    /does not match the manifest's .* modified or truncated after export/,
  );
  await assert.rejects(verifyFile(m, "other", bytes, "dir"), /not listed in realm.json/);
});
