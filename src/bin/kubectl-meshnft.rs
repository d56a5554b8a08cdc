//! `kubectl-meshnft`: the kubectl plugin (`kubectl meshnft check|status|explain|inspect`), talking
//! only to the API server.

fn main() {
    std::process::exit(meshnft_kubectl::main_entry())
}
