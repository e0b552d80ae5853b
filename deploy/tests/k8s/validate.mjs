// SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
// Validate deploy/k8s against the Kubernetes OpenAPI schemas (kubernetes-models, Kubernetes 1.27)
// and the Prometheus Operator's CRD schemas, and check each kustomization.yaml: every resource it
// names exists, and every image the manifests use is set in its `images:`.
//
//   usage: node validate.mjs K8S_DIR     (exit 0, or 1 with every problem listed)
import { readFileSync, readdirSync, existsSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import yaml from "js-yaml";

const dir = process.argv[2];
if (!dir) {
  console.error("usage: node validate.mjs K8S_DIR");
  process.exit(2);
}
const problems = [];
const problem = (where, what) => problems.push(`${where}: ${what}`);

// apiVersion -> the module that holds its kinds.
function modulePath(apiVersion, kind) {
  if (apiVersion.startsWith("monitoring.coreos.com/"))
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`;
  return `kubernetes-models/${apiVersion}/${kind}`; // "v1" or "apps/v1", "networking.k8s.io/v1"
}

function yamlFiles(d) {
  return readdirSync(d).flatMap((f) => {
    const p = join(d, f);
    if (statSync(p).isDirectory()) return yamlFiles(p);
    return /\.ya?ml$/.test(f) ? [p] : [];
  });
}

const images = new Map(); // image name (no tag) -> where used
let objects = 0;
for (const file of yamlFiles(dir)) {
  const where = relative(process.cwd(), file);
  let docs;
  try {
    docs = yaml.loadAll(readFileSync(file, "utf8")).filter((d) => d);
  } catch (e) {
    problem(where, `does not parse: ${e.message}`);
    continue;
  }
  for (const doc of docs) {
    if (doc.kind === "Kustomization" || doc.kind === "Component") continue; // checked below
    const name = `${where} ${doc.kind}/${doc.metadata?.name}`;
    let Model;
    try {
      Model = (await import(modulePath(doc.apiVersion, doc.kind)))[doc.kind];
    } catch {
      problem(name, `no schema for ${doc.apiVersion} ${doc.kind}`);
      continue;
    }
    try {
      new Model(doc).validate();
      objects++;
    } catch (e) {
      problem(name, `rejected by the schema: ${e.message}`);
    }
    const pod = doc.spec?.template?.spec ?? doc.spec?.jobTemplate?.spec?.template?.spec;
    for (const c of [...(pod?.containers ?? []), ...(pod?.initContainers ?? [])])
      images.set(c.image.replace(/[:@].*$/, ""), name);
  }
}

// Each kustomization: what it names exists; the images are set in one place (an `images:` that
// covers every image of the manifests), which every Kustomization takes in as a component.
const kfiles = yamlFiles(dir).filter((f) => /kustomization\.ya?ml$/.test(f));
const withImages = new Set();
for (const file of kfiles) {
  const where = relative(process.cwd(), file);
  const k = yaml.load(readFileSync(file, "utf8"));
  const base = join(file, "..");
  for (const r of [...(k.resources ?? []), ...(k.components ?? [])])
    if (!existsSync(join(base, r))) problem(where, `${r} does not exist`);
  if (!k.images) continue;
  withImages.add(base);
  const set = new Set(k.images.map((i) => i.name));
  for (const [image, used] of images)
    if (!set.has(image)) problem(where, `image ${image} (${used}) is not in images:`);
}
for (const file of kfiles) {
  const k = yaml.load(readFileSync(file, "utf8"));
  const base = join(file, "..");
  const runsImages = (k.resources ?? []).some((r) => {
    const p = join(base, r);
    return existsSync(p) && statSync(p).isFile() && /^\s+image:/m.test(readFileSync(p, "utf8"));
  });
  if (k.kind !== "Kustomization" || k.images || !runsImages) continue;
  if (!(k.components ?? []).some((c) => withImages.has(join(base, c))))
    problem(relative(process.cwd(), file), "takes in no component that sets the images");
}

if (problems.length) {
  for (const p of problems) console.error(`validate.mjs: ${p}`);
  process.exit(1);
}
console.log(`validate.mjs: ${objects} Kubernetes objects valid against their schemas; kustomizations complete`);
