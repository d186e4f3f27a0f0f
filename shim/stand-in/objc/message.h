// stand-in for <objc/message.h>: syntax checks only (see ../README.md).
// As in the SDK (OBJC_OLD_DISPATCH_PROTOTYPES=0), objc_msgSend has no
// usable prototype: every call must cast it to the exact function type.
#ifndef STANDIN_OBJC_MESSAGE_H
#define STANDIN_OBJC_MESSAGE_H
// a system header, as the SDK's is: clang knows objc_msgSend as a builtin
#pragma clang system_header
#include <objc/objc.h>
void objc_msgSend(void);
#endif
