//! `deploy/kubernetes/plexus-cluster.yaml` is parsed and its names checked
//! against each other: the headless Service's port name is the one the
//! StatefulSet's SRV discovery asks for, the StatefulSet is governed by
//! that Service, the pods listen on their pod IP, the selectors match the
//! pod labels, and the cookie comes from a Secret.

use serde_norway::Value;

const MANIFEST: &str = include_str!("../../../deploy/kubernetes/plexus-cluster.yaml");

/// The manifest's documents (split at `---` lines), parsed.
fn documents() -> Vec<Value> {
    let mut docs = Vec::new();
    let mut current = String::new();
    for line in MANIFEST.lines().chain(std::iter::once("---")) {
        if line.trim_end() == "---" {
            if !current.trim().is_empty() {
                docs.push(serde_norway::from_str(&current).expect("a valid YAML document"));
            }
            current.clear();
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    docs
}

fn of_kind(docs: &[Value], kind: &str) -> Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} in the manifest");
    found[0].clone()
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is a string, found {v:?}"))
}

/// The value following `flag` in `args`.
fn arg<'a>(args: &'a [Value], flag: &str) -> &'a str {
    let i = args
        .iter()
        .position(|a| a.as_str() == Some(flag))
        .unwrap_or_else(|| panic!("the container's args have {flag}"));
    str_of(&args[i + 1], flag)
}

/// The environment variable `name` of `container`.
fn env<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["env"]
        .as_sequence()
        .expect("the container has env")
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("the container sets {name}"))
}

#[test]
fn the_manifest_has_a_headless_service_and_a_statefulset_that_discovers_through_it() {
    let docs = documents();
    assert_eq!(docs.len(), 2, "a Service and a StatefulSet");
    let service = of_kind(&docs, "Service");
    let set = of_kind(&docs, "StatefulSet");
    let service_name = str_of(&service["metadata"]["name"], "the Service's name");

    // Headless, and pods are published before they are ready.
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert_eq!(service["spec"]["publishNotReadyAddresses"], true);
    let ports = service["spec"]["ports"]
        .as_sequence()
        .expect("the Service has ports");
    assert_eq!(ports.len(), 1);
    let port_name = str_of(&ports[0]["name"], "the Service port's name");
    let port = ports[0]["port"].as_u64().expect("a port number");

    // The StatefulSet is governed by that Service.
    assert_eq!(set["spec"]["serviceName"], service_name);

    // Selectors match the pod labels.
    let labels = &set["spec"]["template"]["metadata"]["labels"];
    let selector = set["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .expect("the StatefulSet selects by labels");
    assert!(!selector.is_empty());
    for (k, v) in selector {
        assert_eq!(
            &labels[k], v,
            "the pods carry the StatefulSet's selector {k:?}"
        );
    }
    let service_selector = service["spec"]["selector"]
        .as_mapping()
        .expect("the Service selects by labels");
    assert!(!service_selector.is_empty());
    for (k, v) in service_selector {
        assert_eq!(&labels[k], v, "the pods carry the Service's selector {k:?}");
    }

    let containers = set["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .expect("the pods have containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let args = c["args"].as_sequence().expect("the container has args");

    // SRV discovery of the Service's named port:
    // _<port name>._tcp.<service>.<namespace>.svc.<cluster domain>.
    let srv = arg(args, "--discover-dns-srv");
    let expected = format!("_{port_name}._tcp.{service_name}.$(POD_NAMESPACE).svc.");
    assert!(srv.starts_with(&expected), "{srv} asks for {expected}...");
    assert_eq!(
        env(c, "POD_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );

    // Listens on the pod IP (what the SRV records resolve to), on the
    // port the Service names, which the container exposes by that name.
    assert_eq!(arg(args, "--listen"), format!("tcp://$(POD_IP):{port}"));
    assert_eq!(
        env(c, "POD_IP")["valueFrom"]["fieldRef"]["fieldPath"],
        "status.podIP"
    );
    let container_ports = c["ports"].as_sequence().expect("the container has ports");
    assert!(container_ports
        .iter()
        .any(|p| p["name"] == port_name && p["containerPort"].as_u64() == Some(port)));
    assert_eq!(ports[0]["targetPort"], port_name);

    // The cookie comes from a Secret, through the environment.
    assert_eq!(arg(args, "--cookie"), "$(PLEXUS_COOKIE)");
    let secret = &env(c, "PLEXUS_COOKIE")["valueFrom"]["secretKeyRef"];
    assert!(secret["name"].is_string() && secret["key"].is_string());

    // Every member waits for all replicas before the lowest forms.
    let replicas = set["spec"]["replicas"].as_u64().expect("replicas");
    assert_eq!(arg(args, "--bootstrap-min-seeds"), replicas.to_string());
    assert_eq!(set["spec"]["podManagementPolicy"], "Parallel");

    // Resources are requested.
    assert!(c["resources"]["requests"]["cpu"].is_string());
    assert!(c["resources"]["requests"]["memory"].is_string());
}
