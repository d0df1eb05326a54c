// A program that embeds Python by loading libpython itself, after pinshim
// started: pinshim finds the interpreter when the modules change and
// records Python frames from then on. Runs the Python file argv[2] with the
// libpython argv[1] (PYTHONHOME as the interpreter needs it).
//   embed_python LIBPYTHON SCRIPT
#include <dlfcn.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: embed_python LIBPYTHON SCRIPT\n");
    return 2;
  }
  void* python = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (python == nullptr) {
    fprintf(stderr, "embed_python: %s\n", dlerror());
    return 2;
  }
  // pinshim cannot see dlopen return (its hook tail-jumps to the loader),
  // so it notices new modules at its sampler's next tick, or at once when
  // a module is closed: closing one makes this program deterministic.
  if (void* m = dlopen("libm.so.6", RTLD_NOW)) dlclose(m);
  auto initialize = reinterpret_cast<void (*)()>(dlsym(python, "Py_Initialize"));
  auto run = reinterpret_cast<int (*)(const char*)>(dlsym(python, "PyRun_SimpleString"));
  auto finalize = reinterpret_cast<int (*)()>(dlsym(python, "Py_FinalizeEx"));
  if (initialize == nullptr || run == nullptr || finalize == nullptr) {
    fprintf(stderr, "embed_python: not a libpython: %s\n", argv[1]);
    return 2;
  }
  initialize();
  std::string code = "import sys\nsys.argv = ['" + std::string(argv[2]) + "']\n" +
                     "exec(compile(open(sys.argv[0]).read(), sys.argv[0], 'exec'))\n";
  int failed = run(code.c_str());
  if (finalize() != 0) failed = 1;
  return failed == 0 ? 0 : 1;
}
