// biaslab benchmark (filled in with the analyses).
int main() { return 0; }
