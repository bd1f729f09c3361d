// Unit tests of the manifest checks (node --test): the same errors as the Python runtime.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import {
  ADAPT_MODEL,
  ADAPT_SETTINGS,
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
  SETTINGS_NAME,
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
    files: { [STEP_MODEL]: "aa", [FORWARD_MODEL]: "bb", [SOURCE_PARAMS]: "cc", [ADAPT_MODEL]: "dd", "s.npy": "ee" },
    versions: { onnxruntime: "1.19.2" },
    batch_norm: [],
    adapt: {
      file: ADAPT_MODEL,
      state: [
        { input: PARAMS_NAME, output: PARAMS_NAME + NEXT_SUFFIX, initial: SOURCE_PARAMS },
        { input: SETTINGS_NAME, output: SETTINGS_NAME + NEXT_SUFFIX, initial: "s.npy" },
      ],
      settings: [...ADAPT_SETTINGS],
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
  assert.throws(() => parseManifest(rest), /missing fields \["logits_name"\]: not a manifest of this realm-tta's export; re-export the model$/);
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

test("an adapt graph of another version is named, with the fix", () => {
  assert.deepEqual(parseManifest(manifest()).adapt.settings, [...ADAPT_SETTINGS]);
  const cases = [
    [undefined, /adapt.settings is missing or not a list/],
    [LR_NAME, /adapt.settings is missing or not a list/],
    [[LR_NAME, EPISODIC_NAME, "realm.warp"], /adapt.settings lacks \[.*"realm.lr_batch_norm".*\] and has \["realm.warp"\]/],
    [[...ADAPT_SETTINGS].reverse(), /adapt.settings lists the settings in another order/],
  ];
  for (const [slots, named] of cases) {
    const edited = manifest();
    edited.adapt.settings = slots;
    assert.throws(() => parseManifest(edited), named);
    assert.throws(() => parseManifest(edited), /^ArtifactError: realm.json: the adapt graph is not this realm-tta's \(.*\); re-export the model$/);
  }
  const constants = manifest();
  constants.adapt.state = constants.adapt.state.slice(0, 1);
  assert.throws(() => parseManifest(constants), /realm.settings is not among its state inputs\); re-export the model$/);
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
