// Property-based fuzzing (fast-check) of what the JavaScript clients read from outside: the
// state file and the manifest. Every damaged input must give the module's own error
// (StateFileError, ArtifactError), never a TypeError or RangeError from deep inside.
// FUZZ_RUNS sets the examples per property (default 300; the slow tier runs 1000).
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import fc from "fast-check";
import {
  ARTIFACT_FORMAT,
  ARTIFACT_VERSION,
  DIGEST_KEY,
  INPUT_NAME,
  LOGITS_NAME,
  STATE_FORMAT,
  STATE_HEADER_MEMBER,
  STATE_VERSION,
  PARAMS_NAME,
  VELOCITY_NAME,
  EMA_NAME,
} from "../contract.js";
import { ArtifactError, parseManifest, readManifest } from "../manifest.js";
import { StateFileError, float32Array, formatNpy, readState, writeState, writeZip } from "../state-file.js";

const RUNS = Number(process.env.FUZZ_RUNS ?? 300);

const GOOD_STATE = writeState(
  { method: "realm", num_classes: 3, trainable: ["w"], counters: { samples: 2 }, artifacts: "ab" },
  new Map([
    [PARAMS_NAME, float32Array([1.5, -2, 3.25], [3])],
    [VELOCITY_NAME, float32Array([0, 0.125, -1], [3])],
    [EMA_NAME, float32Array([0.5, 0.25, 0.25], [3])],
  ]),
);

/** A damaged copy of bytes: truncated, bits flipped, or a slice replaced. */
const damaged = (/** @type {Uint8Array} */ good) =>
  fc.oneof(
    fc.nat({ max: good.length - 1 }).map((n) => good.slice(0, n)),
    fc.array(fc.tuple(fc.nat({ max: good.length - 1 }), fc.integer({ min: 1, max: 255 })), { minLength: 1, maxLength: 4 })
      .map((flips) => { const b = new Uint8Array(good); for (const [i, m] of flips) b[i] ^= m; return b; }),
    fc.tuple(fc.nat({ max: good.length - 1 }), fc.uint8Array({ minLength: 1, maxLength: 64 }))
      .map(([at, junk]) => { const b = new Uint8Array(good); b.set(junk.subarray(0, b.length - at), at); return b; }),
  );

test("a damaged state file gives StateFileError or reads as a whole", () => {
  fc.assert(
    fc.property(damaged(GOOD_STATE), (bytes) => {
      try {
        const { header } = readState(bytes);
        assert.equal(typeof header, "object"); // survived: a byte nothing checks (a zip date)
      } catch (error) {
        if (!(error instanceof StateFileError)) throw error;
      }
    }),
    { numRuns: RUNS, seed: 1 },
  );
});

test("a state file with any JSON header gives StateFileError, or that header if it fits", () => {
  fc.assert(
    fc.property(fc.jsonValue(), fc.boolean(), (header, stamped) => {
      const value = stamped && typeof header === "object" && header !== null && !Array.isArray(header)
        ? { ...header, format: STATE_FORMAT, version: STATE_VERSION }
        : header;
      const json = new TextEncoder().encode(JSON.stringify(value));
      const bytes = writeZip(new Map([[`${STATE_HEADER_MEMBER}.npy`, formatNpy({ dtype: "|u1", shape: [json.length], data: json })]]));
      try {
        const read = readState(bytes);
        assert.deepEqual(read.header, value); // only a well-formed header is read
      } catch (error) {
        if (!(error instanceof StateFileError)) throw error;
      }
    }),
    { numRuns: RUNS, seed: 2 },
  );
});

function sealedManifest() {
  const zeros = "0".repeat(64);
  const text = JSON.stringify({
    format: ARTIFACT_FORMAT, version: ARTIFACT_VERSION, input: { name: INPUT_NAME, shape: ["B", 1, 4, 4], dtype: "float32" },
    logits_name: LOGITS_NAME, num_classes: 3, config: { method: "realm" }, trainable: { "n.weight": [2] },
    files: { "s.onnx": "aa", "f.onnx": "bb", "p.npy": "cc" }, batch_norm: [],
    portable: { step_model: "s.onnx", forward_model: "f.onnx", source_params: "p.npy", size: 2,
      layout: [{ name: "n.weight", offset: 0, shape: [2] }] },
    [DIGEST_KEY]: zeros,
  }, null, 2);
  const digest = createHash("sha256").update(text).digest("hex");
  return new TextEncoder().encode(text.replace(zeros, digest));
}

test("a damaged manifest gives ArtifactError, unparsable JSON included", async () => {
  const good = sealedManifest();
  await fc.assert(
    fc.asyncProperty(damaged(good), async (bytes) => {
      try {
        await readManifest(bytes);
        assert.deepEqual(bytes, good, "a changed manifest was accepted");
      } catch (error) {
        if (!(error instanceof ArtifactError)) throw error;
      }
    }),
    { numRuns: RUNS, seed: 3 },
  );
});

test("any JSON value as a manifest gives ArtifactError", () => {
  fc.assert(
    fc.property(fc.jsonValue(), (data) => {
      assert.throws(() => parseManifest(data), ArtifactError);
    }),
    { numRuns: RUNS, seed: 4 },
  );
});
