// stand-in for <objc/runtime.h>: syntax checks only (see ../README.md)
#ifndef STANDIN_OBJC_RUNTIME_H
#define STANDIN_OBJC_RUNTIME_H
#include <objc/objc.h>
Class objc_getClass(const char *name);
Class objc_lookUpClass(const char *name);
SEL sel_registerName(const char *str);
const char *class_getName(Class cls);
BOOL class_respondsToSelector(Class cls, SEL sel);
#endif
