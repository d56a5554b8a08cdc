//! `meshnft`: the CNI plugin a runtime execs (with `CNI_COMMAND` set), and
//! the operator commands (without it). Links `meshnft-plugin` only.
fn main() {
    std::process::exit(meshnft_plugin::main_entry())
}
