fn main() {
    std::process::exit(meshnft::main_entry())
}
