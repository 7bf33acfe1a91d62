// biaslab command-line interface (filled in with the analyses).
int main() { return 0; }
