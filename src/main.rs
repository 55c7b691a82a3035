fn main() {
    println!("mtplx-lite: under construction");
}
