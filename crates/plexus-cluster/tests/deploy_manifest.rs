//! The manifests in `deploy/kubernetes` are parsed and their names checked
//! against each other: what a typo in one place would break only once
//! applied (a probe on a port nobody named, a selector that selects
//! nothing, a cookie on argv, a certificate for the wrong address).
//! `.ci/run` validates the same files against the Kubernetes schemas;
//! this checks what a schema cannot: that the pieces agree.

use serde_norway::Value;

const PLAIN: &str = include_str!("../../../deploy/kubernetes/plexus-cluster.yaml");
const TLS: &str = include_str!("../../../deploy/kubernetes/plexus-cluster-tls.yaml");
const APP: &str = include_str!("../../../deploy/kubernetes/app-member.yaml");

/// A manifest's documents (split at `---` lines), parsed.
fn documents(manifest: &str) -> Vec<Value> {
    let mut docs = Vec::new();
    let mut current = String::new();
    for line in manifest.lines().chain(std::iter::once("---")) {
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

fn seq<'a>(v: &'a Value, what: &str) -> &'a [Value] {
    v.as_sequence()
        .unwrap_or_else(|| panic!("{what} is a list, found {v:?}"))
}

/// The value following `flag` in `args`.
fn arg<'a>(args: &'a [Value], flag: &str) -> &'a str {
    let i = args
        .iter()
        .position(|a| a.as_str() == Some(flag))
        .unwrap_or_else(|| panic!("the container's args have {flag}"));
    str_of(&args[i + 1], flag)
}

fn args(container: &Value) -> &[Value] {
    seq(&container["args"], "the container's args")
}

/// The environment variable `name` of `container`.
fn env<'a>(container: &'a Value, name: &str) -> &'a Value {
    seq(&container["env"], "the container's env")
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("the container sets {name}"))
}

fn env_value<'a>(container: &'a Value, name: &str) -> &'a str {
    str_of(&env(container, name)["value"], name)
}

/// The one container of a pod spec called `name`.
fn container<'a>(containers: &'a Value, name: &str) -> &'a Value {
    seq(containers, "containers")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("a container {name}"))
}

/// The pod volume that `container` mounts at `dir` or above it, and the
/// path of `path` inside that volume.
fn volume_at<'a>(pod: &'a Value, container: &Value, path: &str) -> (&'a Value, String) {
    let mount = seq(&container["volumeMounts"], "the container's volumeMounts")
        .iter()
        .filter(|m| {
            let at = str_of(&m["mountPath"], "mountPath");
            path.strip_prefix(at)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
        .max_by_key(|m| str_of(&m["mountPath"], "mountPath").len())
        .unwrap_or_else(|| panic!("{path} is on a volume of {:?}", container["name"]));
    let inside = path[str_of(&mount["mountPath"], "mountPath").len()..]
        .trim_start_matches('/')
        .to_owned();
    let volume = seq(&pod["volumes"], "the pod's volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap_or_else(|| panic!("the pod has the volume {:?}", mount["name"]));
    (volume, inside)
}

/// The ConfigMap's `plexus.toml`, parsed.
fn plexus_toml(docs: &[Value]) -> toml::Table {
    let config_map = of_kind(docs, "ConfigMap");
    let text = str_of(&config_map["data"]["plexus.toml"], "plexus.toml");
    text.parse().expect("plexus.toml is TOML")
}

/// The file `path` of `container` is the ConfigMap's plexus.toml.
fn assert_config_file(docs: &[Value], pod: &Value, container: &Value, path: &str) {
    let (volume, inside) = volume_at(pod, container, path);
    let config_map = of_kind(docs, "ConfigMap");
    assert_eq!(volume["configMap"]["name"], config_map["metadata"]["name"]);
    assert_eq!(inside, "plexus.toml");
}

/// `selector` (matchLabels) selects pods labelled `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_mapping().expect("a label selector");
    assert!(!selector.is_empty(), "an empty selector selects everything");
    selector.iter().all(|(k, v)| &labels[k] == v)
}

/// The pod template of a workload.
fn pod_spec(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]
}

fn pod_labels(workload: &Value) -> &Value {
    &workload["spec"]["template"]["metadata"]["labels"]
}

/// The StatefulSet of the plain and the TLS manifest, and the Deployment
/// of the application, each with its main container's name.
fn workloads() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        ("plain", of_kind(&documents(PLAIN), "StatefulSet"), "plexus"),
        ("tls", of_kind(&documents(TLS), "StatefulSet"), "plexus"),
        ("app", of_kind(&documents(APP), "Deployment"), "app"),
    ]
}

#[test]
fn the_statefulsets_discover_each_other_through_their_headless_service() {
    for (manifest, scheme) in [(PLAIN, "tcp"), (TLS, "tls")] {
        let docs = documents(manifest);
        let kinds: Vec<&str> = docs.iter().map(|d| str_of(&d["kind"], "kind")).collect();
        assert_eq!(
            kinds,
            ["ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget"]
        );
        let service = of_kind(&docs, "Service");
        let set = of_kind(&docs, "StatefulSet");
        let service_name = str_of(&service["metadata"]["name"], "the Service's name");

        // Headless, and pods are published before they are ready (they
        // are ready only once they found each other).
        assert_eq!(service["spec"]["clusterIP"], "None");
        assert_eq!(service["spec"]["publishNotReadyAddresses"], true);
        let ports = seq(&service["spec"]["ports"], "the Service's ports");
        assert_eq!(ports.len(), 1);
        let port_name = str_of(&ports[0]["name"], "the Service port's name");
        let port = ports[0]["port"].as_u64().expect("a port number");

        assert_eq!(set["spec"]["serviceName"], service_name);
        assert!(selects(
            &set["spec"]["selector"]["matchLabels"],
            pod_labels(&set)
        ));
        assert!(selects(&service["spec"]["selector"], pod_labels(&set)));

        let pod = pod_spec(&set);
        let c = container(&pod["containers"], "plexus");
        let args = args(c);
        assert_eq!(str_of(&args[0], "the subcommand"), "member");
        assert_config_file(&docs, pod, c, arg(args, "--config"));
        let config = plexus_toml(&docs);

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
        // port the Service names, with the scheme discovery gives the
        // addresses it finds.
        assert_eq!(
            arg(args, "--listen"),
            format!("{scheme}://$(POD_IP):{port}")
        );
        assert_eq!(config["discovery"]["scheme"].as_str(), Some(scheme));
        assert_eq!(
            env(c, "POD_IP")["valueFrom"]["fieldRef"]["fieldPath"],
            "status.podIP"
        );
        assert!(seq(&c["ports"], "the container's ports")
            .iter()
            .any(|p| p["name"] == port_name && p["containerPort"].as_u64() == Some(port)));
        assert_eq!(ports[0]["targetPort"], port_name);

        // Every member waits for all replicas before the lowest forms.
        let replicas = set["spec"]["replicas"].as_u64().expect("replicas");
        assert_eq!(
            config["cluster"]["bootstrap_min_seeds"].as_integer(),
            Some(replicas as i64)
        );
        assert_eq!(set["spec"]["podManagementPolicy"], "Parallel");
        assert_eq!(config["cluster"]["name"].as_str(), Some("plexus"));
    }
}

#[test]
fn probes_ask_the_management_endpoint_which_prometheus_scrapes() {
    for (name, workload, main) in workloads() {
        let c = container(&pod_spec(&workload)["containers"], main);
        let port = seq(&c["ports"], "the container's ports")
            .iter()
            .find(|p| p["name"] == "management")
            .unwrap_or_else(|| panic!("{name}: a port named management"))["containerPort"]
            .as_u64()
            .expect("a port number");
        assert_eq!(port, 8558, "{name}");

        for (probe, path) in [
            ("startupProbe", "/alive"),
            ("livenessProbe", "/alive"),
            ("readinessProbe", "/ready"),
        ] {
            let get = &c[probe]["httpGet"];
            assert_eq!(get["path"], path, "{name}: {probe}");
            assert_eq!(get["port"], "management", "{name}: {probe}");
        }
        // A start that takes a while (DNS, the others' pods) is not killed.
        let startup = &c["startupProbe"];
        let patience = startup["periodSeconds"].as_u64().unwrap()
            * startup["failureThreshold"].as_u64().unwrap();
        assert!(patience >= 60, "{name}: startup probe waits {patience} s");

        let annotations = &workload["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(annotations["prometheus.io/scrape"], "true", "{name}");
        assert_eq!(
            annotations["prometheus.io/port"],
            port.to_string().as_str(),
            "{name}"
        );
        assert_eq!(annotations["prometheus.io/path"], "/metrics", "{name}");
    }
    // The endpoint listens where the kubelet and Prometheus reach it, on
    // the port the probes name; the application shares this file.
    for manifest in [PLAIN, TLS] {
        let config = plexus_toml(&documents(manifest));
        assert_eq!(config["management"]["bind"].as_str(), Some("0.0.0.0:8558"));
    }
}

#[test]
fn the_cookie_and_token_come_from_a_secret_and_never_from_argv_or_the_config() {
    let secret_of = |c: &Value, var: &str| -> (String, String) {
        let r = &env(c, var)["valueFrom"]["secretKeyRef"];
        (
            str_of(&r["name"], "the Secret's name").to_owned(),
            str_of(&r["key"], "the Secret's key").to_owned(),
        )
    };
    let mut cookies = Vec::new();
    for (name, workload, main) in workloads() {
        let pod = pod_spec(&workload);
        let c = container(&pod["containers"], main);
        cookies.push(secret_of(c, "PLEXUS_NODE__COOKIE"));
        secret_of(c, "PLEXUS_MANAGEMENT__TOKEN");
        let init = pod["initContainers"].as_sequence().map_or(&[][..], |s| s);
        for each in seq(&pod["containers"], "containers").iter().chain(init) {
            for a in each["args"].as_sequence().map_or(&[][..], |s| s) {
                let a = str_of(a, "an arg").to_ascii_lowercase();
                assert!(
                    !a.contains("cookie") && !a.contains("token"),
                    "{name}: a secret on argv: {a}"
                );
            }
        }
    }
    // One cluster, one cookie: the application's pods use the members'.
    assert!(cookies.windows(2).all(|w| w[0] == w[1]), "{cookies:?}");

    for manifest in [PLAIN, TLS] {
        let config = plexus_toml(&documents(manifest));
        let node = config.get("node").and_then(|n| n.as_table());
        let management = config["management"].as_table().unwrap();
        for (section, key) in [(node, "cookie"), (node, "cookie_file")] {
            assert!(section.is_none_or(|s| !s.contains_key(key)), "node.{key}");
        }
        assert!(!management.contains_key("token"));
    }
}

#[test]
fn the_disruption_budget_takes_one_member_at_a_time_and_only_members() {
    for manifest in [PLAIN, TLS] {
        let docs = documents(manifest);
        let set = of_kind(&docs, "StatefulSet");
        let budget = of_kind(&docs, "PodDisruptionBudget");
        assert_eq!(budget["spec"]["maxUnavailable"], 1);
        assert!(budget["spec"]["minAvailable"].is_null());
        assert!(selects(
            &budget["spec"]["selector"]["matchLabels"],
            pod_labels(&set)
        ));
        // Two of three keep a majority: the budget and the split-brain
        // strategy agree.
        assert_eq!(set["spec"]["replicas"], 3);
        assert_eq!(
            plexus_toml(&docs)["cluster"]["split_brain"].as_str(),
            Some("keep-majority")
        );

        // The application's pods are not members' to count, nor seeds.
        let app = of_kind(&documents(APP), "Deployment");
        assert!(!selects(
            &budget["spec"]["selector"]["matchLabels"],
            pod_labels(&app)
        ));
        let service = of_kind(&docs, "Service");
        assert!(!selects(&service["spec"]["selector"], pod_labels(&app)));
    }
}

#[test]
fn each_tls_pod_gets_a_certificate_for_its_own_name_and_ip_and_no_ca_key() {
    let docs = documents(TLS);
    let service = of_kind(&docs, "Service");
    let service_name = str_of(&service["metadata"]["name"], "the Service's name");
    let set = of_kind(&docs, "StatefulSet");
    let pod = pod_spec(&set);
    let init = container(&pod["initContainers"], "certs");
    let main = container(&pod["containers"], "plexus");
    assert_eq!(init["image"], main["image"]);

    let a = args(init);
    assert_eq!(
        (str_of(&a[0], "certs"), str_of(&a[1], "node")),
        ("certs", "node")
    );
    assert_eq!(arg(a, "--name"), "$(POD_NAME)");
    // The pod's stable name under the headless Service, and the address it
    // listens on and is discovered by.
    assert_eq!(
        arg(a, "--dns"),
        format!("$(POD_NAME).{service_name}.$(POD_NAMESPACE).svc.cluster.local")
    );
    assert_eq!(arg(a, "--ip"), "$(POD_IP)");
    assert!(arg(args(main), "--listen").starts_with("tls://$(POD_IP):"));
    for (c, var, field) in [
        (init, "POD_NAME", "metadata.name"),
        (init, "POD_IP", "status.podIP"),
        (init, "POD_NAMESPACE", "metadata.namespace"),
        (main, "POD_NAME", "metadata.name"),
    ] {
        assert_eq!(env(c, var)["valueFrom"]["fieldRef"]["fieldPath"], field);
    }

    // The init container signs with the CA from the Secret...
    let (ca_signing, _) = volume_at(pod, init, arg(a, "--ca"));
    let ca_secret = str_of(&ca_signing["secret"]["secretName"], "the CA Secret");

    // ...into a volume of the pod, where the member finds the files
    // `certs node` wrote: <out>/<name>.pem and .key.
    let out = arg(a, "--out");
    let (written, _) = volume_at(pod, init, out);
    assert!(written["emptyDir"].is_mapping(), "the pod's own volume");
    for (var, ext) in [
        ("PLEXUS_NODE__TLS__CERT", "pem"),
        ("PLEXUS_NODE__TLS__KEY", "key"),
    ] {
        let path = env_value(main, var);
        assert_eq!(path, format!("{out}/$(POD_NAME).{ext}"));
        assert_eq!(volume_at(pod, main, path).0, written);
    }

    // The member trusts the CA's certificate, from the same Secret, and
    // its container has no way to the CA key.
    let config = plexus_toml(&docs);
    let ca_path = config["node"]["tls"]["ca"].as_str().expect("node.tls.ca");
    let (ca, inside) = volume_at(pod, main, ca_path);
    assert_eq!(ca["secret"]["secretName"], ca_secret);
    let items = seq(&ca["secret"]["items"], "the items of the CA volume");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["key"], "ca.pem");
    assert_eq!(items[0]["path"].as_str(), Some(inside.as_str()));
    for m in seq(&main["volumeMounts"], "volumeMounts") {
        assert_ne!(
            m["name"], ca_signing["name"],
            "the member mounts the CA key"
        );
    }
}

#[test]
fn the_application_joins_with_the_members_config_cookie_and_discovery() {
    let members = documents(PLAIN);
    let set = of_kind(&members, "StatefulSet");
    let member = container(&pod_spec(&set)["containers"], "plexus");
    let app = of_kind(&documents(APP), "Deployment");
    let pod = pod_spec(&app);
    let c = container(&pod["containers"], "app");

    // The application's binary is its own: no `plexus member` args. It
    // loads the file the members load, at the path its main names.
    assert!(c["args"].is_null() && c["command"].is_null());
    assert_config_file(&members, pod, c, "/etc/plexus/plexus.toml");
    assert_eq!(arg(args(member), "--config"), "/etc/plexus/plexus.toml");

    // What the members get as flags, it gets as variables, with the same
    // values.
    assert_eq!(
        env_value(c, "PLEXUS_DISCOVERY__DNS_SRV"),
        arg(args(member), "--discover-dns-srv")
    );
    assert_eq!(
        env_value(c, "PLEXUS_NODE__LISTEN"),
        arg(args(member), "--listen")
    );
    for (var, field) in [
        ("POD_IP", "status.podIP"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        assert_eq!(env(c, var)["valueFrom"]["fieldRef"]["fieldPath"], field);
    }
    assert_eq!(
        env(c, "PLEXUS_NODE__COOKIE"),
        env(member, "PLEXUS_NODE__COOKIE")
    );
    assert!(seq(&c["ports"], "ports")
        .iter()
        .any(|p| p["name"] == "plexus" && p["containerPort"] == 4000));
}

#[test]
fn pods_run_unprivileged_with_resources_and_time_to_leave() {
    for (name, workload, _) in workloads() {
        let pod = pod_spec(&workload);
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_eq!(pod["securityContext"]["runAsUser"], 10001, "{name}");
        assert_eq!(pod["automountServiceAccountToken"], false, "{name}");
        // SIGTERM starts a graceful leave (leave_timeout, 2 s by default).
        let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
        assert!(grace >= 10, "{name}: {grace} s to leave");
        assert!(pod["containers"][0]["lifecycle"].is_null(), "{name}");

        let init = pod["initContainers"].as_sequence().map_or(&[][..], |s| s);
        for c in seq(&pod["containers"], "containers").iter().chain(init) {
            let what = format!("{name}: {:?}", c["name"]);
            let sc = &c["securityContext"];
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
            assert_eq!(
                seq(&sc["capabilities"]["drop"], "dropped capabilities"),
                ["ALL"],
                "{what}"
            );
            assert!(c["resources"]["requests"]["cpu"].is_string(), "{what}");
            assert!(c["resources"]["requests"]["memory"].is_string(), "{what}");
            assert!(c["resources"]["limits"]["memory"].is_string(), "{what}");
        }
    }
}
