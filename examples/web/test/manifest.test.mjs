// Unit tests of the manifest checks (node --test): the same errors as the Python runtime.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import { ArtifactError, checkOrtVersion, parseManifest, sha256Hex, verifyFile } from "../manifest.js";

function manifest(overrides = {}) {
  return {
    format: "realm-tta/artifacts",
    version: 1,
    input: { name: "input", shape: ["batch", 1, 4, 4], dtype: "float32" },
    logits_name: "logits",
    num_classes: 3,
    config: { method: "realm" },
    trainable: { "n.weight": [2], "realm.alpha": [] },
    files: { "web_training_model.onnx": "aa", "web_decide.onnx": "bb", checkpoint: "cc" },
    versions: { onnxruntime: "1.19.2" },
    web: {
      training_model: "web_training_model.onnx",
      decide_model: "web_decide.onnx",
      layout: { names: ["n.weight", "realm.alpha"], offsets: [0, 2], sizes: [2, 1], total: 3 },
    },
    ...overrides,
  };
}

test("a good manifest parses", () => {
  assert.equal(parseManifest(manifest()).num_classes, 3);
});

test("wrong format, version, missing fields and a missing web section are named", () => {
  assert.throws(() => parseManifest(manifest({ format: "x" })), /format "x" is not 'realm-tta\/artifacts'/);
  assert.throws(() => parseManifest(manifest({ version: 2 })), /artifact format version 2 is not supported .* re-export/);
  const { logits_name, ...rest } = manifest();
  assert.equal(logits_name, "logits");
  assert.throws(() => parseManifest(rest), /missing fields \["logits_name"\]/);
  assert.throws(() => parseManifest(manifest({ web: undefined })), /no 'web' section/);
  assert.throws(() => parseManifest([1, 2]), /does not hold a JSON object/);
  assert.throws(() => parseManifest(null), ArtifactError);
});

test("an inconsistent layout and unlisted web graphs are refused", () => {
  const bad = manifest();
  bad.web.layout.total = 4;
  assert.throws(() => parseManifest(bad), /inconsistent web.layout \(sizes sum to 3, total 4\)/);
  const unlisted = manifest({ files: { checkpoint: "cc", "web_decide.onnx": "bb" } });
  assert.throws(() => parseManifest(unlisted), /web_training_model.onnx is not listed/);
});

test("sha256Hex agrees with node's hash", async () => {
  const bytes = new TextEncoder().encode("realm-tta");
  assert.equal(await sha256Hex(bytes), createHash("sha256").update(bytes).digest("hex"));
});

test("verifyFile: missing, tampered and good files", async () => {
  const bytes = new Uint8Array([1, 2, 3]);
  const m = manifest({ files: { checkpoint: await sha256Hex(bytes) } });
  await verifyFile(m, "checkpoint", bytes, "dir");
  await assert.rejects(verifyFile(m, "checkpoint", null, "dir"), /dir\/checkpoint: listed in realm.json but missing/);
  await assert.rejects(
    verifyFile(m, "checkpoint", new Uint8Array([1, 2, 4]), "dir"),
    /does not match the manifest's .* modified or truncated after export/,
  );
  await assert.rejects(verifyFile(m, "other", bytes, "dir"), /not listed in realm.json/);
});

test("ORT versions must agree in major.minor", () => {
  checkOrtVersion(manifest(), "1.19.2");
  checkOrtVersion(manifest(), "1.19.0");
  assert.throws(() => checkOrtVersion(manifest(), "1.20.0"), /exported with onnxruntime 1.19.2, this page runs onnxruntime-web 1.20.0/);
  assert.throws(() => checkOrtVersion(manifest({ versions: {} }), "1.19.2"), /\(unknown\)/);
});
