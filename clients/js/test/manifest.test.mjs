// Unit tests of the manifest checks (node --test): the same errors as the Python runtime.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import {
  ADAPT_MODEL,
  ALPHA_NAME,
  ARTIFACT_FORMAT,
  ARTIFACT_VERSION,
  DIGEST_KEY,
  EPISODIC_NAME,
  FORWARD_MODEL,
  INPUT_NAME,
  LOGITS_NAME,
  LR_NAME,
  NEXT_SUFFIX,
  PARAMS_NAME,
  SOURCE_PARAMS,
  STEP_MODEL,
} from "../contract.js";
import { ArtifactError, checkFormat, checkSeal, parseManifest, readManifest, sha256Hex, verifyFile } from "../manifest.js";

function manifest(overrides = {}) {
  return {
    format: ARTIFACT_FORMAT,
    version: ARTIFACT_VERSION,
    input: { name: INPUT_NAME, shape: ["B", 1, 4, 4], dtype: "float32" },
    logits_name: LOGITS_NAME,
    num_classes: 3,
    config: { method: "realm" },
    trainable: { "n.weight": [2], [ALPHA_NAME]: [] },
    files: { [STEP_MODEL]: "aa", [FORWARD_MODEL]: "bb", [SOURCE_PARAMS]: "cc", [ADAPT_MODEL]: "dd" },
    versions: { onnxruntime: "1.19.2" },
    adapt: {
      file: ADAPT_MODEL,
      state: [{ input: PARAMS_NAME, output: PARAMS_NAME + NEXT_SUFFIX, initial: SOURCE_PARAMS }],
    },
    portable: {
      step_model: STEP_MODEL,
      forward_model: FORWARD_MODEL,
      source_params: SOURCE_PARAMS,
      size: 3,
      layout: [{ name: "n.weight", offset: 0, shape: [2] }, { name: ALPHA_NAME, offset: 2, shape: [] }],
    },
    ...overrides,
  };
}

test("a good manifest parses", () => {
  assert.equal(parseManifest(manifest()).num_classes, 3);
});

test("wrong format, version, missing fields and missing graphs are named", () => {
  assert.throws(() => parseManifest(manifest({ format: "x" })), /format "x" is not 'realm-tta\/artifacts'/);
  assert.throws(() => parseManifest(manifest({ version: 3 })), /artifact format version 3 is not supported .* re-export/);
  const { logits_name, ...rest } = manifest();
  assert.equal(logits_name, LOGITS_NAME);
  assert.throws(() => parseManifest(rest), /missing fields \["logits_name"\]/);
  assert.throws(() => parseManifest(manifest({ portable: undefined })), /no portable step graph; re-export/);
  assert.throws(() => parseManifest(manifest({ portable: { error: "no norm layer" } })), /no portable step graph: no norm layer/);
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
  const unlisted = manifest({ files: { [STEP_MODEL]: "aa", [ADAPT_MODEL]: "dd" } });
  assert.throws(() => parseManifest(unlisted), /source_params.npy is not listed among the checksummed files/);
});

test("a re-sealed adapt.settings that is not a list of known names is named", () => {
  const good = manifest();
  good.adapt.settings = [LR_NAME, EPISODIC_NAME];
  assert.deepEqual(parseManifest(good).adapt.settings, [LR_NAME, EPISODIC_NAME]);
  for (const bad of [LR_NAME, { lr: 1 }, [1, 2]]) {
    const edited = manifest();
    edited.adapt.settings = bad;
    assert.throws(() => parseManifest(edited), /realm.json: adapt.settings must be a list of setting names, got (string|object|list); re-export/);
  }
  const unknown = manifest();
  unknown.adapt.settings = [LR_NAME, "realm.warp"];
  assert.throws(() => parseManifest(unknown), /reads settings \["realm.warp"\] that this client does not know: upgrade realm-tta/);
});

test("sha256Hex agrees with node's hash", async () => {
  const bytes = new TextEncoder().encode("realm-tta");
  assert.equal(await sha256Hex(bytes), createHash("sha256").update(bytes).digest("hex"));
});

test("verifyFile: missing, tampered and good files", async () => {
  const bytes = new Uint8Array([1, 2, 3]);
  const m = manifest({ files: { [STEP_MODEL]: await sha256Hex(bytes) } });
  await verifyFile(m, STEP_MODEL, bytes, "dir");
  await assert.rejects(verifyFile(m, STEP_MODEL, null, "dir"), /dir\/step_model.onnx: listed in realm.json but missing/);
  await assert.rejects(
    verifyFile(m, STEP_MODEL, new Uint8Array([1, 2, 4]), "dir"),
    /does not match the manifest's .* modified or truncated after export/,
  );
  await assert.rejects(verifyFile(m, "other", bytes, "dir"), /not listed in realm.json/);
});

/** The exporter's sealing, written again with node's own hash (not the module's). */
function sealed(data) {
  const zeros = "0".repeat(64);
  const text = JSON.stringify({ ...data, [DIGEST_KEY]: zeros }, null, 2);
  const digest = createHash("sha256").update(text).digest("hex");
  return new TextEncoder().encode(text.replace(`"${DIGEST_KEY}": "${zeros}"`, `"${DIGEST_KEY}": "${digest}"`));
}

test("a sealed manifest passes; an old version is told to re-export", async () => {
  const raw = sealed(manifest());
  const data = JSON.parse(new TextDecoder().decode(raw));
  assert.match(await checkSeal(raw, data), /^[0-9a-f]{64}$/);
  assert.throws(() => checkFormat({ ...data, version: 1 }), /version 1 is not supported .* re-export/);
});

test("a change to any byte of the manifest is refused", async () => {
  const raw = sealed(manifest());
  for (let i = 0; i < raw.length; i++) {
    const bad = new Uint8Array(raw);
    bad[i] ^= 0x01;
    await assert.rejects(
      readManifest(bad),
      ArtifactError,
      `byte ${i} (${JSON.stringify(String.fromCharCode(raw[i]))}) flipped and accepted`,
    );
  }
});

test("a missing or malformed seal is named", async () => {
  const data = manifest();
  const raw = new TextEncoder().encode(JSON.stringify(data));
  await assert.rejects(checkSeal(raw, data), /no valid manifest_sha256/);
  const good = new TextDecoder().decode(sealed(manifest()));
  const field = good.match(/"manifest_sha256": "[0-9a-f]{64}"/)[0];
  const twice = new TextEncoder().encode(good.replace("{", `{\n  ${field},`)); // a duplicate key
  await assert.rejects(checkSeal(twice, JSON.parse(new TextDecoder().decode(twice))), /must appear exactly once/);
});
