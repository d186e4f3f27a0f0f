// stand-in for <objc/objc.h>: syntax checks only (see ../README.md)
#ifndef STANDIN_OBJC_OBJC_H
#define STANDIN_OBJC_OBJC_H
#include <stdbool.h>
typedef struct objc_class *Class;
typedef struct objc_object {
	Class isa;
} * id;
typedef struct objc_selector *SEL;
typedef id (*IMP)(id, SEL, ...);
typedef bool BOOL;
#define YES true
#define NO false
#ifndef nil
#define nil ((void *)0)
#endif
#ifndef Nil
#define Nil ((void *)0)
#endif
#endif
